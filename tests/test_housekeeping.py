"""The worker's housekeeping (``kuitti.housekeeping``): finished webhook deliveries, e-mails and
idempotency records are deleted once past their retention, in batches, through an index; the
rest stays. SQLite's planner statistics are refreshed."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

import httpx
import pytest
from sqlalchemy import func, select, text

from kuitti import housekeeping
from kuitti.clock import FrozenClock
from kuitti.dbmigrate import refresh_statistics
from kuitti.housekeeping import (
    delete_expired,
    expired_deliveries,
    expired_idempotency_records,
    expired_mail,
)
from kuitti.models import IdempotencyRecord, MailMessage, WebhookAttempt, WebhookDelivery
from kuitti.services import Services
from tests.conftest import CLOCK_START
from tests.factories import auth, make_partner, receipt_doc
from tests.plans import explain_in_session

LIST = "/api/v1/receipts/"
DAY = timedelta(days=1)


def add_delivery(services: Services, partner_id: uuid.UUID, status: str, last: datetime) -> None:
    with services.db.session() as session:
        delivery = WebhookDelivery(
            partner_id=partner_id,
            notification_type="receipt.delivered",
            payload="{}",
            status=status,
            next_attempt_at=last,
            created_at=last - DAY,
            delivered_at=last if status == "delivered" else None,
        )
        session.add(delivery)
        session.flush()
        session.add(WebhookAttempt(delivery_id=delivery.id, at=last, status_code=200, latency_ms=5))


def add_mail(services: Services, status: str, last: datetime) -> None:
    with services.db.session() as session:
        session.add(
            MailMessage(
                to_address="maija@example.com",
                subject="Tervetuloa",
                text_body="Hei",
                status=status,
                next_attempt_at=last,
                created_at=last,
            )
        )


def count(services: Services, model: type[object]) -> int:
    with services.db.session(write=False) as session:
        return int(session.scalar(select(func.count()).select_from(model)) or 0)


def statuses(services: Services, model: type[WebhookDelivery] | type[MailMessage]) -> list[str]:
    with services.db.session(write=False) as session:
        return sorted(session.scalars(select(model.status)))


def test_finished_deliveries_and_mail_go_after_their_retention_pending_ones_stay(
    services: Services, clock: FrozenClock
) -> None:
    partner = make_partner(services).partner
    now = CLOCK_START + 40 * DAY
    for status in ("delivered", "failed", "pending"):
        add_delivery(services, partner.id, status, now - 31 * DAY)  # past 30 days (but pending)
        add_delivery(services, partner.id, status, now - 29 * DAY)  # within
    for status in ("sent", "failed", "pending"):
        add_mail(services, status, now - 31 * DAY)
        add_mail(services, status, now - 29 * DAY)
    clock.set(now)

    deleted = delete_expired(services)

    assert deleted == {
        "receipt_months": 0,
        "receipts": 0,
        "webhook_deliveries": 2,
        "mail_messages": 2,
        "idempotency_records": 0,
    }
    assert statuses(services, WebhookDelivery) == ["delivered", "failed", "pending", "pending"]
    assert statuses(services, MailMessage) == ["failed", "pending", "pending", "sent"]
    assert count(services, WebhookAttempt) == 4  # the deleted deliveries' attempts went with them
    assert delete_expired(services) == dict.fromkeys(deleted, 0)


def test_many_expired_rows_go_in_batches(
    services: Services, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(housekeeping, "RETENTION_BATCH", 2)
    partner = make_partner(services).partner
    for days in range(5):
        add_delivery(services, partner.id, "delivered", CLOCK_START - days * DAY)
    clock.set(CLOCK_START + 31 * DAY)

    assert delete_expired(services)["webhook_deliveries"] == 5
    assert count(services, WebhookDelivery) == 0


def test_an_idempotency_key_is_replayed_for_its_retention_then_free_again(
    services: Services, clock: FrozenClock, client: httpx.Client
) -> None:
    merchant = make_partner(services)
    headers = {**auth(merchant.api_key), "Idempotency-Key": "pos-1-0001"}
    first = client.post(LIST, json=receipt_doc(receiptNumber="A-1"), headers=headers)
    assert first.status_code == 200, first.text
    other = receipt_doc(receiptNumber="A-2")

    clock.set(CLOCK_START + 6 * DAY)
    assert delete_expired(services)["idempotency_records"] == 0
    reused = client.post(LIST, json=other, headers=headers)
    assert reused.status_code == 409, reused.text
    assert reused.json()["error"] == "idempotency_key_reused"

    clock.set(CLOCK_START + 8 * DAY)
    assert delete_expired(services)["idempotency_records"] == 1
    assert count(services, IdempotencyRecord) == 0
    again = client.post(LIST, json=other, headers=headers)
    assert again.status_code == 200, again.text
    assert again.json()["receipt_id"] != first.json()["receipt_id"]


@pytest.mark.parametrize(
    ("query", "index", "range_column"),
    [
        (expired_deliveries, "ix_webhook_deliveries_due", "next_attempt_at"),
        (expired_mail, "ix_mail_messages_due", "next_attempt_at"),
        (expired_idempotency_records, "ix_idempotency_records_created", "created_at"),
    ],
)
def test_each_retention_batch_is_found_through_an_index_range(
    services: Services, query: object, index: str, range_column: str
) -> None:
    assert callable(query)
    plan = explain_in_session(services.db, query(CLOCK_START))
    if services.db.dialect == "postgresql":
        assert f"using {index} on" in plan, plan
        condition = plan.split(f"using {index} on", 1)[1].split("Index Cond:", 1)[1]
        assert f"{range_column} <" in condition.splitlines()[0], plan
    else:
        assert f"INDEX {index} (" in plan, plan
        assert f"{range_column}<?" in plan.split(f"INDEX {index} (", 1)[1], plan


@pytest.mark.sqlite_only
def test_sqlite_keeps_planner_statistics_after_a_migration_and_each_round(
    services: Services, client: httpx.Client
) -> None:
    merchant = make_partner(services)
    posted = client.post(LIST, json=receipt_doc(), headers=auth(merchant.api_key))
    assert posted.status_code == 200, posted.text
    with services.db.engine.begin() as connection:
        connection.execute(text("DELETE FROM sqlite_stat1"))
    refresh_statistics(services.db)
    with services.db.engine.connect() as connection:
        tables = set(connection.scalars(text("SELECT tbl FROM sqlite_stat1")))
    assert {"receipts", "receipt_grants", "partners"} <= tables
