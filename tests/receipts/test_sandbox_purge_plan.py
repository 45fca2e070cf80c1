"""The sandbox clean-up finds its batch through the index that holds only sandbox receipts, on
both databases: written as SQLAlchemy writes a boolean (``sandbox IS true``, ``sandbox = 1``),
neither database saw that the index applies, and each batch read every receipt (1.8 s at two
million stored). The plan as the database gives it (``tests/plans.py``)."""

from __future__ import annotations

import re

from kuitti.receipts.sandbox import expired_sandbox_receipts
from kuitti.services import Services
from tests.conftest import CLOCK_START
from tests.plans import explain_in_session, index_and_partitions


def test_the_purge_batch_is_a_range_of_the_sandbox_index(services: Services) -> None:
    plan = explain_in_session(services.db, expired_sandbox_receipts(CLOCK_START, 500))
    if services.db.dialect == "postgresql":
        # One range of the index, or of each month's partition of it (kuitti.partitions).
        indexes = index_and_partitions(services.db, "ix_receipts_sandbox_created")
        scans = re.findall(r"using (\S+) on receipts\S*.*\n\s*Index Cond: \(created_at <", plan)
        assert scans, plan
        assert set(scans) <= set(indexes), plan
    else:
        assert "USING INDEX ix_receipts_sandbox_created (created_at<?)" in plan, plan
