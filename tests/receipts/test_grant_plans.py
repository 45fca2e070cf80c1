"""Which index a partner's rights check reads: every lookup of grants that names receipts takes
``ix_receipt_grants_receipt`` with the receipt and the partner both in its condition, one probe
per receipt (migration 0010 dropped the index that led with the partner for it). The list's
plans are in tests/receipts/test_list_plans.py.

Explained as the server sends the statements, with grants stored and their statistics taken
(``store_grants``), on PostgreSQL with sequential scans turned off (``tests.plans``)."""

from __future__ import annotations

import re

from kuitti.receipts.readers import _MAY_READ, _READABLE_WITH_KEY, Reader, _readable_ids_query
from kuitti.services import Services
from tests.factories import store_grants
from tests.plans import explain, explain_in_session, index_and_partitions

INDEX = "ix_receipt_grants_receipt"


def takes_receipt_and_partner(services: Services, plan: str) -> bool:
    """The plan reads the grants by ``INDEX`` (or its partitions') on both columns, and by no
    other index. On PostgreSQL the grants are partitioned by receipt (migration 0012): a check
    of one receipt reads its month's partition alone, and the planner may read that receipt's
    grants (one or two) once and match the partner in a hash of them (``hashed SubPlan``)."""
    if services.db.is_sqlite:
        searches = re.findall(r"SEARCH \S+ USING (?:COVERING )?INDEX (\S+) \((.*?)\)", plan)
        grants = [(index, c) for index, c in searches if index.startswith("ix_receipt_grants")]
        return bool(grants) and all(
            index == INDEX and "receipt_id=" in c and "partner_id=" in c for index, c in grants
        )
    indexes = index_and_partitions(services.db, INDEX)
    scans = re.findall(r"using (\S+) on (receipt_grants\S*).*\n\s*Index Cond: (.*)", plan)
    hashed = "hashed SubPlan" in plan and len({table for _index, table, _c in scans}) == 1
    return bool(scans) and all(
        index in indexes and "receipt_id = " in c and ("partner_id = " in c or hashed)
        for index, _table, c in scans
    )


def test_the_single_reads_rights_check_is_one_probe_of_the_grants_by_receipt(
    services: Services,
) -> None:
    [(partner_id, receipt_id), *_] = store_grants(services)
    params = {"receipt_id": receipt_id, "partner_id": partner_id}
    plan = explain(services.db, _MAY_READ["partner"], params)
    assert takes_receipt_and_partner(services, plan), plan


def test_a_read_by_key_checks_the_right_by_receipt_and_partner(services: Services) -> None:
    [(_partner_id, receipt_id), *_] = store_grants(services)
    params = {"receipt_id": receipt_id, "digest": "0" * 64}
    plan = explain(services.db, _READABLE_WITH_KEY, params)
    assert takes_receipt_and_partner(services, plan), plan


def test_which_of_a_pages_receipts_a_partner_may_read_is_a_probe_per_receipt(
    services: Services,
) -> None:
    """The check of a page from a replica on the primary (``_readable_ids``), its ``IN``
    list expanded as a session sends it."""
    [(partner_id, receipt_id), *_] = store_grants(services)
    reader = Reader(partner_id=partner_id)
    plan = explain_in_session(services.db, _readable_ids_query(reader, {receipt_id}))
    assert takes_receipt_and_partner(services, plan), plan
