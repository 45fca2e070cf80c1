"""The query plans of what reads partitioned tables (``kuitti.partitions``) and of retention
(``kuitti.retention``): a receipt read by id, a partner's grants of one receipt, a month's card
payments and an update of one visit one month's partition; a retention batch, a month's clean-up
and card-linking's look-ups of payments are index ranges. The list's plans are in
tests/receipts/test_list_plans.py."""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime, timedelta

import httpx
import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.models import (
    CardMatch,
    CardPaymentRecord,
    MailMessage,
    Receipt,
    ReceiptClaim,
    ReceiptGrant,
    ReceiptLink,
)
from kuitti.months import Month
from kuitti.partitions import ensure_month_partitions
from kuitti.retention import expired_receipts
from kuitti.services import Services
from tests.factories import auth, make_partner, receipt_doc
from tests.plans import explain_in_session, explain_sent, index_and_partitions

MONTH = Month(2027, 1)


def scanned(plan: str) -> list[tuple[str, str]]:
    """(index, table) of every index scan in a PostgreSQL plan."""
    return re.findall(r"using (\S+) on (\S+)", plan)


@pytest.mark.postgres_only
def test_reading_a_receipt_by_id_visits_its_months_partition_only(services: Services) -> None:
    with services.db.session() as session:
        ensure_month_partitions(session, MONTH)
    receipt_id = uuid.UUID(int=MONTH.first_id.int + 12345)
    plan = explain_in_session(services.db, select(Receipt).where(Receipt.id == receipt_id))
    assert [table for _index, table in scanned(plan)] == ["receipts_p202701"], plan


@pytest.mark.postgres_only
def test_a_partners_grants_of_a_receipt_are_read_from_its_months_partition_only(
    services: Services,
) -> None:
    """Grants are partitioned by their receipt (migration 0012): the check whether a partner
    may read a receipt is one range of the receipt index, in the receipt's month alone."""
    with services.db.session() as session:
        ensure_month_partitions(session, MONTH)
    receipt_id = uuid.UUID(int=MONTH.first_id.int + 12345)
    query = select(ReceiptGrant).where(
        ReceiptGrant.partner_id == uuid.uuid4(), ReceiptGrant.receipt_id == receipt_id
    )
    plan = explain_in_session(services.db, query)
    indexes = index_and_partitions(services.db, "ix_receipt_grants_receipt")
    [(index, table)] = scanned(plan)
    assert (index in indexes, table) == (True, "receipt_grants_p202701"), plan


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
    low, high = MONTH.first_id, MONTH.next.first_id
    for model, index in (
        (ReceiptLink, "ix_receipt_links_receipt_id"),
        (ReceiptClaim, "pk_receipt_claims"),
        (CardMatch, "ix_card_matches_receipt_id"),
        (MailMessage, "ix_mail_messages_receipt_id"),
    ):
        column = model.receipt_id
        plan = explain_in_session(services.db, select(column).where(column >= low, column < high))
        assert [i for i, _table in scanned(plan)] == [index], plan


@pytest.mark.postgres_only
def test_a_months_card_payments_are_read_from_its_partition_only(services: Services) -> None:
    """The payments ``drop_month`` frees card purchases and queue entries of."""
    with services.db.session() as session:
        ensure_month_partitions(session, MONTH)
    low, high = MONTH.first_id, MONTH.next.first_id
    column = CardPaymentRecord.receipt_id
    plan = explain_in_session(services.db, select(column).where(column >= low, column < high))
    indexes = index_and_partitions(services.db, "uq_card_payments_receipt_index")
    [(index, table)] = scanned(plan)
    assert (index in indexes, table) == (True, "card_payments_p202701"), plan


@pytest.mark.postgres_only
def test_an_update_of_a_card_payment_visits_its_months_partition_only(
    client: httpx.Client, services: Services
) -> None:
    """The ORM names a payment by (id, receipt_id), the partitioned table's key."""
    merchant = make_partner(services)
    answer = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    receipt_id = uuid.UUID(answer.json()["receipt_id"])

    def expire_it(session: Session) -> None:
        [record] = session.scalars(
            select(CardPaymentRecord).where(CardPaymentRecord.receipt_id == receipt_id)
        )
        record.status = "expired"
        session.flush()

    plan = explain_sent(services.db, expire_it, "UPDATE")
    where = Month.of_id(receipt_id)
    partition = f"card_payments_p{where.year:04d}{where.month:02d}"
    tables = {table for _index, table in scanned(plan)}
    assert tables in ({partition}, {"card_payments_legacy"}), plan


def test_card_linkings_look_ups_of_payments_are_index_ranges(services: Services) -> None:
    """A transaction's look-up of waiting payments, the settle sweep and the expiry read one
    range of their index in each month's partition: no scan, whatever the months hold."""
    now = datetime(2027, 1, 15, tzinfo=UTC)
    # The look-up's (an empty test table may take the waiting payments' index, also a range).
    looked_up = (
        (
            ("ix_card_payments_lookup", "ix_card_payments_waiting"),
            select(CardPaymentRecord).where(
                CardPaymentRecord.merchant_id == "MID-1",
                CardPaymentRecord.amount == 849,
                CardPaymentRecord.pan_last4 == "1234",
                CardPaymentRecord.paid_at >= now - timedelta(days=7),
                CardPaymentRecord.paid_at <= now,
                CardPaymentRecord.status == "waiting",
            ),
        ),
        (
            ("ix_card_payments_mid_settle",),
            select(CardPaymentRecord)
            .where(
                CardPaymentRecord.merchant_id == "MID-1",
                CardPaymentRecord.settle_at.is_not(None),
                CardPaymentRecord.settle_at <= now,
            )
            .order_by(CardPaymentRecord.settle_at)
            .limit(50),
        ),
        (
            ("ix_card_payments_waiting",),
            select(CardPaymentRecord)
            .where(
                CardPaymentRecord.status == "waiting",
                CardPaymentRecord.paid_at < now - timedelta(days=7),
            )
            .order_by(CardPaymentRecord.paid_at)
            .limit(50),
        ),
    )
    for indexes, query in looked_up:
        plan = explain_in_session(services.db, query)
        if services.db.is_sqlite:
            assert any(f"USING INDEX {index}" in plan for index in indexes), plan
            continue
        names = [name for index in indexes for name in index_and_partitions(services.db, index)]
        scans = scanned(plan)
        assert scans, plan
        assert all(name in names for name, _table in scans), plan
        assert "Seq Scan" not in plan, plan


def _conditions(plan: str) -> list[str]:
    return re.findall(r"Index Cond: (.*)", plan)
