"""The query plans of what reads partitioned tables (``kuitti.partitions``) and of retention
(``kuitti.retention``): a receipt read by id visits one month's partition, a retention batch and
a month's clean-up are index ranges. The list's plans are in tests/receipts/test_list_plans.py."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, date, datetime

import pytest
from sqlalchemy import select

from kuitti.models import CardPaymentRecord, Receipt, ReceiptLink
from kuitti.partitions import add_months, ensure_month_partitions, month_floor
from kuitti.retention import expired_receipts
from kuitti.services import Services
from tests.plans import explain_in_session, index_and_partitions

MONTH = date(2027, 1, 1)


def scanned(plan: str) -> list[tuple[str, str]]:
    """(index, table) of every index scan in a PostgreSQL plan."""
    return re.findall(r"using (\S+) on (\S+)", plan)


@pytest.mark.postgres_only
def test_reading_a_receipt_by_id_visits_its_months_partition_only(services: Services) -> None:
    with services.db.session() as session:
        ensure_month_partitions(session, MONTH)
    receipt_id = uuid.UUID(int=month_floor(MONTH).int + 12345)
    plan = explain_in_session(services.db, select(Receipt).where(Receipt.id == receipt_id))
    assert [table for _index, table in scanned(plan)] == ["receipts_p202701"], plan


def test_a_retention_batch_is_a_range_of_the_grants_listing_index(services: Services) -> None:
    query = expired_receipts(uuid.uuid4(), datetime(2027, 1, 1, tzinfo=UTC), 50)
    plan = explain_in_session(services.db, query)
    if services.db.is_sqlite:
        assert "USING INDEX ix_receipt_grants_listing (partner_id=? AND receipt_time<?)" in plan
        return
    indexes = index_and_partitions(services.db, "ix_receipt_grants_listing")
    scans = scanned(plan)
    assert scans
    assert all(index in indexes for index, _table in scans), plan
    assert all("partner_id = " in c and "receipt_time < " in c for c in _conditions(plan)), plan


@pytest.mark.postgres_only
def test_a_months_clean_up_reads_index_ranges_of_the_unpartitioned_tables(
    services: Services,
) -> None:
    """What ``drop_month`` deletes outside the partitions: one range of an index each."""
    low, high = month_floor(MONTH), month_floor(add_months(MONTH, 1))
    for model, index in (
        (CardPaymentRecord, "uq_card_payments_receipt_index"),
        (ReceiptLink, "ix_receipt_links_receipt_id"),
    ):
        column = model.receipt_id
        plan = explain_in_session(services.db, select(column).where(column >= low, column < high))
        assert [i for i, _table in scanned(plan)] == [index], plan


def _conditions(plan: str) -> list[str]:
    return re.findall(r"Index Cond: (.*)", plan)
