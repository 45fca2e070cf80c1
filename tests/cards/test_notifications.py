"""Webhook rows written by card-linking, with their exact bodies (docs/webhooks.md)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import orjson

from kuitti import signatures
from kuitti.cards.service import check_card_request, enroll_card
from kuitti.links import private_link
from kuitti.models import Card, PartnerRole
from tests.cards.support import AUTH_CODE, HOOK, PAID_AT, REFERENCE, World, connect_app
from tests.factories import add_connection, auth, make_partner, receipt_doc
from tests.receipts.test_posted_bytes import odd_document
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import deliver


class TestCardAdded:
    def test_body(self, world: World) -> None:
        answer = world.client.post(
            "/api/v1/cards/",
            json={
                "partner_card_id": "card-1",
                "masked_pan": "415301******1234",
                "exp_date": "2028-12",
                "name": "Maija Meikäläinen",
            },
            headers=auth(world.issuer.api_key),
        )
        [row] = world.webhooks("card_added")
        assert row["partner_id"] == world.issuer.partner.id
        assert row["bare"] is True
        assert row["body"] == {
            "notification_type": "card_added",
            "partner_card_id": "card-1",
            "service_card_id": answer.json()["service_card_id"],
            "data": {
                "name": "Maija Meikäläinen",
                "masked_pan": "415301******1234",
                "exp_date": "2028-12-31T23:59:59Z",
            },
        }

    def test_without_a_name_there_is_no_name(self, world: World) -> None:
        world.enroll(link=False)
        [row] = world.webhooks("card_added")
        assert "name" not in row["body"]["data"]


class TestIssuerReceiptNotification:
    def test_body(self, world: World) -> None:
        card = world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt()
        [row] = world.webhooks("receipt_notification")
        assert row["partner_id"] == world.issuer.partner.id
        assert row["bare"] is True
        assert row["body"] == {
            "notification_type": "receipt_notification",
            "partner_card_id": "card-1",
            "service_card_id": card,
            "data": {
                "receipt_id": receipt,
                "merchant_name": "Kauppa Oy",
                "timestamp": "2026-01-15T12:03:11Z",
                "amount": "849",
                "merchant_id": "MID-000123",
                "reference_number": REFERENCE,
                "authorization_code": AUTH_CODE,
                "transaction_type": "auth",
            },
        }

    def test_an_issuer_can_fetch_the_matched_receipt(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt()
        answer = world.client.get(
            f"/api/v1/receipts/{receipt}/service_json/", headers=auth(world.issuer.api_key)
        )
        assert answer.status_code == 200
        assert answer.json()["receiptNumber"] == "R-2026-0001"


class TestTransactionNotification:
    def test_each_reading_app_of_the_card_user_hears_of_the_purchase_once(
        self, world: World
    ) -> None:
        app, connection = connect_app(world.services, world.user, metadata={"customer": "42"})
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        world.transaction(kind="clearing", authorization_code=AUTH_CODE)  # same purchase
        [row] = world.webhooks("transaction_notification")
        assert row["partner_id"] == app.partner.id
        assert row["bare"] is False
        assert row["body"] == {
            "notification_type": "transaction_notification",
            "service_id": str(connection.id),
            "receipt_id": None,
            "data": {"merchant_name": "Kauppa Kamppi"},
            "partner_metadata": {"customer": "42"},
        }

    def test_receipt_id_is_the_receipt_when_it_is_already_matched(self, world: World) -> None:
        _app, connection = connect_app(world.services, world.user)
        world.enroll()
        receipt = world.receipt()
        world.transaction(authorization_code=AUTH_CODE)
        [row] = world.webhooks("transaction_notification")
        assert row["body"]["receipt_id"] == receipt
        assert row["body"]["service_id"] == str(connection.id)
        [note] = [r for r in world.webhooks("receipt_notification") if r["body"].get("service_id")]
        assert note["body"]["receipt_id"] == receipt

    def test_no_notification_for_a_card_without_a_user(self, world: World) -> None:
        connect_app(world.services, world.user)
        world.enroll(link=False)
        world.transaction(authorization_code=AUTH_CODE)
        assert world.webhooks("transaction_notification") == []


class TestFullReceiptNotification:
    def test_body(self, world: World) -> None:
        bank = world.pilot_bank(name="Maija")
        assert world.webhooks("card_added") == []
        doc = receipt_doc()
        world.clock.set(PAID_AT + timedelta(minutes=20))
        receipt = world.receipt(doc)
        [row] = world.webhooks("full_receipt_notification")
        assert row["partner_id"] == bank.partner.id
        assert row["bare"] is False

        assert row["body"] == {
            "service_id": None,
            "notification_type": "full_receipt_notification",
            "receipt_id": receipt,
            "receipt_json": doc,
            "receipt_web_url": private_link(world.services.settings, uuid.UUID(receipt)),
        }
        assert world.webhooks("receipt_notification") == []

    def test_the_bank_receives_the_posted_bytes_and_verifies_their_signature(
        self, world: World
    ) -> None:
        """``receipt_json`` is the receipt as its merchant posted it, byte for byte, in the body
        a real HTTP server receives: the signature the bank reads with the receipt id verifies
        over the bytes between ``"receipt_json":`` and ``,"receipt_web_url":``."""
        posted = b" \n" + odd_document() + b"\r\n"
        with Receiver() as endpoint:
            bank = world.pilot_bank(webhook_url=endpoint.url)
            world.clock.set(PAID_AT + timedelta(minutes=20))
            answer = world.client.post(
                "/api/v1/receipts/",
                content=posted,
                headers={**auth(world.merchant.api_key), "Content-Type": "application/json"},
            )
            assert answer.status_code == 200, answer.text
            receipt_id = answer.json()["receipt_id"]
            world.settle()
            assert deliver(world.services) == 1
            [call] = endpoint.wait_for(1)
        body = call.body
        start = body.index(b'"receipt_json":') + len(b'"receipt_json":')
        embedded = body[start : body.rindex(b',"receipt_web_url":')]
        assert embedded == posted
        assert orjson.loads(body)["receipt_id"] == receipt_id
        read = world.client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/", headers=auth(bank.api_key)
        )
        assert read.status_code == 200, read.text
        keys = world.client.get(signatures.JWKS_PATH).json()
        verdict = signatures.verify(embedded, read.headers[signatures.SIGNATURE_HEADER], keys)
        assert verdict.valid, verdict

    def test_service_id_is_the_pilot_users_connection_to_the_bank(self, world: World) -> None:

        bank = make_partner(
            world.services, PartnerRole.BANK_PILOT, name="Pilot Bank", webhook_url=HOOK
        )
        now = world.clock.now()
        with world.services.db.session() as session:
            card, _ = enroll_card(
                session,
                bank.partner,
                check_card_request("pilot-1", "415301******1234", "2028-12", None),
                now=now,
                pilot=True,
            )
            stored = session.get(Card, card.id)
            assert stored is not None
            stored.user_id = world.user.id
            connection = add_connection(session, world.user.id, bank.partner.id, now=now)
        world.clock.set(PAID_AT + timedelta(minutes=20))
        receipt = world.receipt()
        [row] = world.webhooks("full_receipt_notification")
        assert row["body"]["service_id"] == str(connection.id)
        assert world.owners(receipt) == {world.user.id}
