"""A return that names its purchase by number and time finds it through the merchant's grants:
one range of the grants' listing index (partner and time), then each receipt it names by its
primary key (on SQLite; PostgreSQL joins a test's small tables in an order of its own). No index
of receipt numbers is needed (migration 0010 dropped it). Explained as a session sends it
(``tests.plans``), with grants stored and their statistics taken."""

from __future__ import annotations

import re
from datetime import UTC, datetime

from sqlalchemy import select

from kuitti.models import Receipt
from kuitti.posting.returns import numbered
from kuitti.services import Services
from tests.factories import store_grants
from tests.plans import explain_in_session, index_and_partitions


def test_a_purchase_named_by_number_is_found_by_the_grants_listing_index(
    services: Services,
) -> None:
    [(partner_id, _receipt_id), *_] = store_grants(services)
    moment = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)
    query = select(Receipt.id).where(numbered(partner_id, "R-1", moment))
    plan = explain_in_session(services.db, query)
    if services.db.is_sqlite:
        listing = (
            r"USING (COVERING )?INDEX ix_receipt_grants_listing \(partner_id=\? AND receipt_time=\?"
        )
        assert re.search(listing, plan), plan
        assert re.search(r"SEARCH receipts USING INDEX sqlite_autoindex_receipts_1 \(id=\?\)", plan)
        assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", ""), plan
        return
    # PostgreSQL, sequential scans off, joins these small tables in either order; what holds
    # is that the partition holding the grants is read by the listing index on both columns.
    listing_indexes = index_and_partitions(services.db, "ix_receipt_grants_listing")
    scans = re.findall(r"using (\S+) on (\S+).*\n\s*Index Cond: (.*)", plan)
    assert any(
        index in listing_indexes and "partner_id = " in c and "receipt_time = " in c
        for index, _table, c in scans
    ), plan
