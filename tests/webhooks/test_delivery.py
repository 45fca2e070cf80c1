"""Webhooks end to end: outbox row → worker → a real HTTP receiver on loopback, verified with
the ``standardwebhooks`` reference library."""

from __future__ import annotations

import contextlib
import dataclasses
import uuid
from datetime import timedelta

import httpx
import orjson
import pytest
from sqlalchemy import func, select
from standardwebhooks import Webhook
from structlog.testing import LogCapture

from kuitti.clock import FrozenClock
from kuitti.config import Settings
from kuitti.delivery.service import deliver_to_user
from kuitti.models import PartnerRole, Receipt, WebhookDelivery
from kuitti.models.outbox import DeliveryStatus
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from kuitti.webhooks import worker as webhook_worker
from kuitti.webhooks.events import enqueue
from kuitti.webhooks.payloads import (
    CardAdded,
    CardAddedData,
    CardReceiptData,
    CardReceiptNotification,
    FullReceiptNotification,
    OAuthRevokeNotification,
    ReceiptNotification,
    TransactionData,
    TransactionNotification,
    WebhookPayload,
)
from tests.factories import auth, make_partner, make_user, receipt_doc
from tests.logcapture import captured_logs
from tests.webhooks.receivers import Behaviour, Received, Receiver
from tests.webhooks.support import (
    a_receipt_notification,
    add_connection,
    deliver,
    delivery,
    queue,
    webhook_partner,
    with_settings,
)


def post_receipt(client: httpx.Client, services: Services) -> uuid.UUID:
    merchant = make_partner(services, name="Kauppa Oy")
    response = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert response.status_code == 200, response.text
    return uuid.UUID(response.json()["receipt_id"])


def verify(call: Received, key: str) -> object:
    """What a partner does: check the signature with the reference library."""
    return Webhook(key).verify(call.body, call.headers)


class TestReceiptNotification:
    def test_delivered_to_user_notifies_each_reading_connection(
        self, client: httpx.Client, services: Services
    ) -> None:
        receipt_id = post_receipt(client, services)
        user = make_user(services)
        with Receiver() as bank, Receiver() as expenses:
            bank_app = webhook_partner(services, bank.url, name="Pankki")
            expense_app = webhook_partner(services, expenses.url, name="Kulut")
            writer_only = webhook_partner(services, expenses.url, name="Vain kirjoitus")
            reading = add_connection(
                services, user.id, bank_app.partner.id, metadata={"customer": "c-77"}
            )
            plain = add_connection(
                services, user.id, expense_app.partner.id, scope="receipt:write receipt:read"
            )
            add_connection(services, user.id, writer_only.partner.id, scope="receipt:write")
            with services.db.session() as session:
                receipt = session.get(Receipt, receipt_id)
                assert receipt is not None
                deliver_to_user(session, receipt, user.id, via="test", now=services.clock.now())

            assert deliver(services) == 2
            [bank_call] = bank.wait_for(1)
            [expense_call] = expenses.wait_for(1)

        assert bank_call.headers["authorization"] == f"Token {bank_app.webhook_key}"
        assert bank_call.headers["content-type"] == "application/json"
        assert bank_call.path == "/hooks/kuitti"
        assert verify(bank_call, str(bank_app.webhook_key)) == {
            "notification_type": "receipt_notification",
            "service_id": str(reading.id),
            "receipt_id": str(receipt_id),
            "partner_metadata": {"customer": "c-77"},
        }
        # No partner_metadata key at all when the connection has none.
        assert orjson.loads(expense_call.body) == {
            "notification_type": "receipt_notification",
            "service_id": str(plain.id),
            "receipt_id": str(receipt_id),
        }
        verify(expense_call, str(expense_app.webhook_key))
        # The body on the wire is the stored outbox payload, byte for byte.
        stored = delivery(services, uuid.UUID(bank_call.webhook_id))
        assert bank_call.body == stored.payload.encode()
        assert stored.status == DeliveryStatus.DELIVERED

    def test_revoked_connection_gets_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        receipt_id = post_receipt(client, services)
        user = make_user(services)
        with Receiver() as bank:
            app = webhook_partner(services, bank.url)
            add_connection(services, user.id, app.partner.id, revoked=True)
            with services.db.session() as session:
                receipt = session.get(Receipt, receipt_id)
                assert receipt is not None
                deliver_to_user(session, receipt, user.id, via="test", now=services.clock.now())
            assert deliver(services) == 0
        assert bank.received == []


SERVICE_ID = uuid.UUID("0b7c4a52-9b7e-4d4c-8f4e-6f1f3c1c2a10")
RECEIPT_ID = uuid.UUID("5d0c9c0e-3f0e-4b9e-9d55-2b8b8f6d2f11")
CARD_ID = uuid.UUID("3f1c0d1e-8a3b-4c55-9d0e-1b2c3d4e5f60")
CARD_DATA = {"masked_pan": "415301******1234", "exp_date": "2028-12-31T23:59:59Z"}
ISSUER_RECEIPT_DATA = {
    "receipt_id": str(RECEIPT_ID),
    "merchant_name": "Kauppa Oy",
    "timestamp": "2026-01-15T12:03:11Z",
    "amount": "849",
    "merchant_id": "MID-000123",
}


def issuer_receipt(**codes: str) -> CardReceiptNotification:
    data = CardReceiptData.model_validate({**ISSUER_RECEIPT_DATA, **codes})
    return CardReceiptNotification(partner_card_id="card-1", service_card_id=CARD_ID, data=data)


class TestEveryNotificationType:
    """Each payload model gives the interface's body byte for byte: key order, ``null`` where
    the interface sends it, and keys left out where it leaves them out."""

    @pytest.mark.parametrize(
        ("payload", "roles", "bare", "body"),
        [
            (
                ReceiptNotification(service_id=SERVICE_ID, receipt_id=RECEIPT_ID),
                (PartnerRole.APP,),
                False,
                {
                    "notification_type": "receipt_notification",
                    "service_id": str(SERVICE_ID),
                    "receipt_id": str(RECEIPT_ID),
                },
            ),
            (
                TransactionNotification(
                    service_id=SERVICE_ID,
                    receipt_id=None,
                    data=TransactionData(merchant_name="Kauppa Oy"),
                    partner_metadata={"customer": "c-77"},
                ),
                (PartnerRole.APP,),
                False,
                {
                    "notification_type": "transaction_notification",
                    "service_id": str(SERVICE_ID),
                    "receipt_id": None,
                    "data": {"merchant_name": "Kauppa Oy"},
                    "partner_metadata": {"customer": "c-77"},
                },
            ),
            (
                OAuthRevokeNotification(service_id=SERVICE_ID, partner_metadata={"ä": "ö"}),
                (PartnerRole.APP,),
                False,
                {
                    "notification_type": "oauth_authorization_revoke",
                    "service_id": str(SERVICE_ID),
                    "partner_metadata": {"ä": "ö"},
                },
            ),
            (
                CardAdded(
                    partner_card_id="card-1",
                    service_card_id=CARD_ID,
                    data=CardAddedData(**CARD_DATA),
                ),
                (PartnerRole.CARD_ISSUER,),
                True,
                {
                    "notification_type": "card_added",
                    "partner_card_id": "card-1",
                    "service_card_id": str(CARD_ID),
                    "data": CARD_DATA,
                },
            ),
            (
                CardAdded(
                    partner_card_id="card-1",
                    service_card_id=CARD_ID,
                    data=CardAddedData(name="Maija Meikäläinen", **CARD_DATA),
                ),
                (PartnerRole.CARD_ISSUER,),
                True,
                {
                    "notification_type": "card_added",
                    "partner_card_id": "card-1",
                    "service_card_id": str(CARD_ID),
                    "data": {"name": "Maija Meikäläinen", **CARD_DATA},
                },
            ),
            (
                issuer_receipt(transaction_type="auth"),
                (PartnerRole.CARD_ISSUER,),
                True,
                {
                    "notification_type": "receipt_notification",
                    "partner_card_id": "card-1",
                    "service_card_id": str(CARD_ID),
                    "data": {**ISSUER_RECEIPT_DATA, "transaction_type": "auth"},
                },
            ),
            (
                issuer_receipt(
                    reference_number="260115140311",
                    authorization_code="A1B2C3",
                    transaction_type="clearing",
                ),
                (PartnerRole.CARD_ISSUER,),
                True,
                {
                    "notification_type": "receipt_notification",
                    "partner_card_id": "card-1",
                    "service_card_id": str(CARD_ID),
                    "data": {
                        **ISSUER_RECEIPT_DATA,
                        "reference_number": "260115140311",
                        "authorization_code": "A1B2C3",
                        "transaction_type": "clearing",
                    },
                },
            ),
            (
                FullReceiptNotification(
                    service_id=None,
                    receipt_id=RECEIPT_ID,
                    receipt_json=receipt_doc(),
                    receipt_web_url="https://kuitti.example/r/abc",
                ),
                (PartnerRole.BANK_PILOT,),
                False,
                {
                    "service_id": None,
                    "notification_type": "full_receipt_notification",
                    "receipt_id": str(RECEIPT_ID),
                    "receipt_json": receipt_doc(),
                    "receipt_web_url": "https://kuitti.example/r/abc",
                },
            ),
        ],
    )
    def test_body_headers_and_signature(
        self,
        services: Services,
        payload: WebhookPayload,
        roles: tuple[PartnerRole, ...],
        bare: bool,
        body: dict[str, object],
    ) -> None:
        with Receiver() as partner_endpoint:
            partner = webhook_partner(services, partner_endpoint.url, *roles)
            delivery_id = queue(services, partner, payload)
            assert deliver(services) == 1
            [call] = partner_endpoint.wait_for(1)
        key = str(partner.webhook_key)
        expected_auth = key if bare else f"Token {key}"
        assert call.headers["authorization"] == expected_auth
        assert call.headers["content-type"] == "application/json"
        assert call.webhook_id == str(delivery_id)
        assert verify(call, key) == body
        assert call.body == orjson.dumps(body)

    def test_a_tampered_body_does_not_verify(self, services: Services) -> None:
        from standardwebhooks.webhooks import WebhookVerificationError

        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            queue(services, partner)
            deliver(services)
            [call] = endpoint.wait_for(1)
        with pytest.raises(WebhookVerificationError):
            Webhook(str(partner.webhook_key)).verify(call.body + b" ", call.headers)
        other = make_partner(services, PartnerRole.APP, name="Toinen", webhook_url=endpoint.url)
        with pytest.raises(WebhookVerificationError):
            Webhook(str(other.webhook_key)).verify(call.body, call.headers)

    def test_partner_without_webhook_url_gets_no_row(self, services: Services) -> None:
        partner = make_partner(services, PartnerRole.APP)
        with services.db.session() as session:
            assert (
                enqueue(
                    session, partner.partner, a_receipt_notification(), now=services.clock.now()
                )
                is None
            )
            assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == 0


class TestOutbox:
    def test_rolled_back_transaction_sends_nothing(self, services: Services) -> None:
        class Boom(Exception):
            pass

        def change_that_fails(partner: NewPartner) -> None:
            with services.db.session() as session:
                enqueue(
                    session, partner.partner, a_receipt_notification(), now=services.clock.now()
                )
                session.flush()
                raise Boom

        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            with pytest.raises(Boom):
                change_that_fails(partner)
            assert deliver(services) == 0
        assert endpoint.received == []

    def test_committed_event_survives_a_worker_that_was_not_running(
        self, services: Services, clock: FrozenClock
    ) -> None:
        """The row is the event: queued while no worker runs, sent when one starts."""
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            ids = {str(queue(services, partner)) for _ in range(3)}
            clock.advance(3600)
            assert deliver(services) == 3
            assert {c.webhook_id for c in endpoint.wait_for(3)} == ids


class TestFaults:
    def test_500_is_retried_with_the_same_webhook_id(
        self, services: Services, clock: FrozenClock
    ) -> None:
        with Receiver(Behaviour(status=500)) as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            assert deliver(services) == 1
            row = delivery(services, delivery_id)
            assert row.status == DeliveryStatus.PENDING
            assert [(a.status_code, a.error) for a in row.attempts] == [(500, "HTTP 500")]
            assert deliver(services) == 0  # not due yet
            clock.set(row.next_attempt_at)
            assert deliver(services) == 1
            first, second = endpoint.wait_for(2)
        assert first.webhook_id == second.webhook_id == str(delivery_id)
        assert first.body == second.body
        row = delivery(services, delivery_id)
        assert row.status == DeliveryStatus.DELIVERED
        assert [a.status_code for a in row.attempts] == [500, 200]

    def test_redirect_is_not_followed(self, services: Services) -> None:
        with Receiver() as elsewhere:
            with Receiver(Behaviour(status=302, location=elsewhere.url)) as endpoint:
                partner = webhook_partner(services, endpoint.url)
                delivery_id = queue(services, partner)
                deliver(services)
                endpoint.wait_for(1)
            row = delivery(services, delivery_id)
        assert elsewhere.received == []
        assert row.status == DeliveryStatus.PENDING
        [attempt] = row.attempts
        assert attempt.status_code == 302
        assert attempt.error is not None
        assert "redirects are not followed" in attempt.error

    def test_timeout(self, services: Services) -> None:
        quick = with_settings(services, webhook_timeout_seconds=0.3)
        with Receiver(Behaviour(hang=True)) as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            deliver(quick)
        row = delivery(services, delivery_id)
        [attempt] = row.attempts
        assert attempt.status_code is None
        assert attempt.error == "timed out after 0.3 s"
        assert 250 <= attempt.latency_ms < 3000
        assert row.status == DeliveryStatus.PENDING

    def test_connection_closed_without_answer(self, services: Services, clock: FrozenClock) -> None:
        with Receiver(Behaviour(close=True)) as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            deliver(services)
            endpoint.wait_for(1)
            row = delivery(services, delivery_id)
            [attempt] = row.attempts
            assert attempt.status_code is None
            assert attempt.error is not None
            assert attempt.error == "the connection was closed without an answer"
            # …and the next attempt, on a new connection, gets through.
            clock.set(row.next_attempt_at)
            assert deliver(services) == 1
        assert delivery(services, delivery_id).status == DeliveryStatus.DELIVERED

    def test_slow_answer_within_the_timeout_is_delivered(self, services: Services) -> None:
        with Receiver(Behaviour(delay_seconds=0.3)) as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            deliver(with_settings(services, webhook_timeout_seconds=5))
        row = delivery(services, delivery_id)
        assert row.status == DeliveryStatus.DELIVERED
        assert row.attempts[0].latency_ms >= 300

    def test_unreachable_endpoint_is_a_failed_attempt(self, services: Services) -> None:
        with Receiver() as endpoint:
            url = endpoint.url
        partner = webhook_partner(services, url)  # nobody listens there any more
        delivery_id = queue(services, partner)
        assert deliver(services) == 1
        [attempt] = delivery(services, delivery_id).attempts
        assert attempt.error is not None
        assert attempt.error.startswith("could not connect: ")

    def test_key_sealed_with_another_secret_names_the_secret(self, services: Services) -> None:
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            settings = services.settings.model_dump() | {
                "secret_key": "another-server-secret-of-32-bytes-or-more"
            }
            other = dataclasses.replace(services, settings=Settings(**settings))
            assert deliver(other) == 1
            assert endpoint.received == []
        [attempt] = delivery(services, delivery_id).attempts
        assert attempt.error is not None
        assert "sealed with another server secret" in attempt.error
        assert "KUITTI_SECRET_KEY" in attempt.error


def info_logs(monkeypatch: pytest.MonkeyPatch) -> contextlib.AbstractContextManager[LogCapture]:
    """Capture the worker's log lines at info level (the tests' own level may be higher)."""
    return captured_logs(monkeypatch, webhook_worker)


class TestAttemptLog:
    def test_one_info_line_per_attempt(
        self, services: Services, clock: FrozenClock, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        with Receiver(Behaviour(status=503)) as endpoint:
            partner = webhook_partner(services, endpoint.url)
            revoke = OAuthRevokeNotification(service_id=uuid.uuid4())
            delivery_id = queue(services, partner, revoke)
            with info_logs(monkeypatch) as capture:
                deliver(services)
                clock.set(delivery(services, delivery_id).next_attempt_at)
                deliver(services)
        lines = [line for line in capture.entries if line["event"] == "webhook attempt"]
        assert [line.pop("latency_ms") >= 0 for line in lines] == [True, True]
        assert lines == [
            {
                "event": "webhook attempt",
                "log_level": "info",
                "delivery_id": str(delivery_id),
                "partner_id": str(partner.partner.id),
                "notification_type": "oauth_authorization_revoke",
                "status_code": status,
                "error": error,
            }
            for status, error in [(503, "HTTP 503"), (200, None)]
        ]


class TestRetrySchedule:
    def test_backoff_with_jitter_then_failed(self, services: Services, clock: FrozenClock) -> None:
        schedule = (5, 30, 120, 600)
        quick = with_settings(services, webhook_retry_schedule=schedule)
        with Receiver(default=Behaviour(status=503)) as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            for delay in schedule:
                assert deliver(quick) == 1
                row = delivery(services, delivery_id)
                assert row.status == DeliveryStatus.PENDING
                wait = (row.next_attempt_at - services.clock.now()).total_seconds()
                assert delay * 0.9 <= wait <= delay * 1.1
                clock.advance(wait - 0.001)
                assert deliver(quick) == 0  # a moment early: nothing
                clock.advance(0.001)
            assert deliver(quick) == 1
            endpoint.wait_for(len(schedule) + 1)
            assert deliver(quick) == 0
            clock.advance(10 * 86400)
            assert deliver(quick) == 0  # failed for good: never again
        row = delivery(services, delivery_id)
        assert row.status == DeliveryStatus.FAILED
        assert row.attempt_count == len(schedule) + 1
        assert [a.status_code for a in row.attempts] == [503] * (len(schedule) + 1)

    def test_default_schedule_lasts_about_three_days(self, services: Services) -> None:
        total = sum(services.settings.webhook_retry_schedule)
        assert timedelta(seconds=total * 0.9) > timedelta(days=2.5)
        assert timedelta(seconds=total * 1.1) < timedelta(days=3.5)

    def test_jitter_is_spread_within_ten_percent(self, services: Services) -> None:
        import random

        from kuitti.outbox import retry_delay_seconds

        rng = random.Random(7)
        delays = [retry_delay_seconds(services.settings, 3, rng) for _ in range(2000)]
        assert min(delays) >= 108
        assert max(delays) <= 132
        assert min(delays) < 110
        assert max(delays) > 130
