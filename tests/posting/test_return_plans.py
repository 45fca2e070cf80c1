"""A return that names its purchase by number and time finds it through the merchant's grants:
one range of the grants' listing index (partner and time), then each receipt it names by its
primary key; no index of receipt numbers is needed (migration 0010 dropped it). Explained as a
session sends it (``tests.plans``)."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime

from sqlalchemy import select

from kuitti.models import Receipt
from kuitti.posting.returns import numbered
from kuitti.services import Services
from tests.plans import explain_in_session, index_and_partitions


def test_a_purchase_named_by_number_is_found_by_the_grants_listing_index(
    services: Services,
) -> None:
    moment = datetime(2026, 11, 2, 10, 30, tzinfo=UTC)
    query = select(Receipt.id).where(numbered(uuid.uuid4(), "R-1", moment))
    plan = explain_in_session(services.db, query)
    if services.db.is_sqlite:
        listing = (
            r"USING (COVERING )?INDEX ix_receipt_grants_listing \(partner_id=\? AND receipt_time=\?"
        )
        assert re.search(listing, plan), plan
        assert re.search(r"SEARCH receipts USING INDEX sqlite_autoindex_receipts_1 \(id=\?\)", plan)
        assert "SCAN" not in plan.replace("SCAN CONSTANT ROW", ""), plan
        return
    listing_indexes = index_and_partitions(services.db, "ix_receipt_grants_listing")
    primary = index_and_partitions(services.db, "pk_receipts")
    scans = re.findall(r"using (\S+) on (\S+).*\n\s*Index Cond: (.*)", plan)
    grants = [(index, c) for index, table, c in scans if table.startswith("receipt_grants")]
    receipts = [(index, c) for index, table, c in scans if table.startswith("receipts")]
    assert grants, plan
    assert receipts, plan
    for index, condition in grants:
        assert index in listing_indexes, plan
        assert "partner_id = " in condition, plan
        assert "receipt_time = " in condition, plan
    for index, condition in receipts:
        assert index in primary, plan
        assert "id = " in condition, plan
