"""Every notification type, produced by the code path that causes it (cards API, card
transactions, card-linking, pilot cards, a user removing a connection), reaches a real receiver
with the interface's body and headers, verifies with ``standardwebhooks``, and validates against
the schema the OpenAPI document publishes for it (``jsonschema``)."""

from __future__ import annotations

import uuid
from datetime import timedelta

import httpx
import orjson
import pytest
from jsonschema import Draft202012Validator, ValidationError
from standardwebhooks import Webhook

from kuitti.app import create_app
from kuitti.cards.service import check_card_request, enroll_card
from kuitti.clock import FrozenClock
from kuitti.links import private_link
from kuitti.models import Connection, PartnerRole
from kuitti.services import Services
from kuitti.users.service import revoke_connection
from kuitti.webhooks.payloads import NotificationType
from tests.cards.support import AUTH_CODE, MID, PAID_AT, PAN, World
from tests.factories import make_partner, make_user, receipt_doc
from tests.webhooks.receivers import Received, Receiver
from tests.webhooks.support import add_connection, deliver, delivery, webhook_partner


def published_schema(services: Services, name: str) -> Draft202012Validator:
    """A validator for a schema of the OpenAPI document's ``components``, its references
    resolved within the document, with formats (``uuid``) checked."""
    components = create_app(services.settings).openapi()["components"]
    return Draft202012Validator(
        {"$ref": f"#/components/schemas/{name}", "components": components},
        format_checker=Draft202012Validator.FORMAT_CHECKER,
    )


def check_published(services: Services, body: object, *, bare: bool) -> None:
    """The body is one of ``WebhookPayload``'s and fits the schema of its own ``webhooks`` entry."""
    assert isinstance(body, dict)
    published_schema(services, "WebhookPayload").validate(body)
    name = body["notification_type"]
    if bare and name == NotificationType.RECEIPT:
        name = "card_issuer_receipt_notification"
    webhooks = create_app(services.settings).openapi()["webhooks"]
    content = webhooks[name]["post"]["requestBody"]["content"]
    ref = content["application/json"]["schema"]["$ref"]
    published_schema(services, ref.rsplit("/", 1)[1]).validate(body)


def check(services: Services, call: Received, key: str | None, *, bare: bool) -> object:
    """Headers as the interface gives them, the signature as a partner checks it, the body on
    the wire equal to the outbox row and valid against the published schema."""
    assert key is not None
    assert call.headers["authorization"] == (key if bare else f"Token {key}")
    assert call.headers["content-type"] == "application/json"
    assert call.body == delivery(services, uuid.UUID(call.webhook_id)).payload.encode()
    body = Webhook(key).verify(call.body, call.headers)
    check_published(services, body, bare=bare)
    return body


def world_with(services: Services, client: httpx.Client, clock: FrozenClock, url: str) -> World:
    issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Pankki Oyj", webhook_url=url)
    merchant = make_partner(services, PartnerRole.MERCHANT, name="Kauppa Oy")
    user = make_user(services, "maija@example.com")
    return World(services, client, issuer, merchant, user, clock)


class TestCardIssuerWebhooks:
    def test_card_added(self, services: Services, client: httpx.Client, clock: FrozenClock) -> None:
        with Receiver() as issuer_endpoint:
            world = world_with(services, client, clock, issuer_endpoint.url)
            card_id = world.enroll(link=False, name="Maija Meikäläinen")
            assert deliver(services) == 1
            [call] = issuer_endpoint.wait_for(1)
        assert check(services, call, world.issuer.webhook_key, bare=True) == {
            "notification_type": "card_added",
            "partner_card_id": "card-1",
            "service_card_id": card_id,
            "data": {
                "name": "Maija Meikäläinen",
                "masked_pan": PAN,
                "exp_date": "2028-12-31T23:59:59Z",
            },
        }

    def test_transaction_then_receipt(
        self, services: Services, client: httpx.Client, clock: FrozenClock
    ) -> None:
        """A card transaction tells the holder's app; the matching receipt then goes to the
        issuer (card style) and to the app (partner-application style)."""
        with Receiver() as issuer_endpoint, Receiver() as app_endpoint:
            world = world_with(services, client, clock, issuer_endpoint.url)
            app = webhook_partner(services, app_endpoint.url, name="Kuittisovellus")
            connection = add_connection(
                services, world.user.id, app.partner.id, metadata={"customer": "c-9"}
            )
            card_id = world.enroll()
            deliver(services)
            issuer_endpoint.wait_for(1)  # card_added

            world.transaction(authorization_code=AUTH_CODE)
            deliver(services)
            [transaction_call] = app_endpoint.wait_for(1)
            transaction = check(services, transaction_call, app.webhook_key, bare=False)
            assert isinstance(transaction, dict)
            assert transaction["notification_type"] == "transaction_notification"
            assert transaction["service_id"] == str(connection.id)
            assert transaction["data"] == {"merchant_name": "Kauppa Kamppi"}
            assert transaction["partner_metadata"] == {"customer": "c-9"}

            receipt_id = world.receipt()
            deliver(services)
            _, issuer_call = issuer_endpoint.wait_for(2)
            _, app_call = app_endpoint.wait_for(2)
        assert check(services, issuer_call, world.issuer.webhook_key, bare=True) == {
            "notification_type": "receipt_notification",
            "partner_card_id": "card-1",
            "service_card_id": card_id,
            "data": {
                "receipt_id": receipt_id,
                "merchant_name": "Kauppa Oy",
                "timestamp": "2026-01-15T12:03:11Z",
                "amount": str(receipt_doc()["totalPriceIncVAT"]),
                "merchant_id": MID,
                "reference_number": "260115140311",
                "authorization_code": AUTH_CODE,
                "transaction_type": "auth",
            },
        }
        assert check(services, app_call, app.webhook_key, bare=False) == {
            "notification_type": "receipt_notification",
            "service_id": str(connection.id),
            "receipt_id": receipt_id,
            "partner_metadata": {"customer": "c-9"},
        }


class TestBankPilot:
    def test_full_receipt_notification(
        self, services: Services, client: httpx.Client, clock: FrozenClock
    ) -> None:
        with Receiver() as bank_endpoint:
            world = world_with(services, client, clock, "http://127.0.0.1:9/unused")
            bank = make_partner(
                services, PartnerRole.BANK_PILOT, name="Pilot Bank", webhook_url=bank_endpoint.url
            )
            with services.db.session() as session:
                enroll_card(
                    session,
                    bank.partner,
                    check_card_request("pilot-1", PAN, "2028-12", "Maija"),
                    now=clock.now(),
                    pilot=True,
                )
            doc = receipt_doc()
            clock.set(PAID_AT + timedelta(minutes=20))
            receipt_id = world.receipt(doc)
            deliver(services)
            [call] = bank_endpoint.wait_for(1)
        body = check(services, call, bank.webhook_key, bare=False)
        assert body == {
            "service_id": None,
            "notification_type": "full_receipt_notification",
            "receipt_id": receipt_id,
            "receipt_json": doc,
            "receipt_web_url": private_link(services.settings, uuid.UUID(receipt_id)),
        }


class TestConnectionRemoved:
    def test_oauth_authorization_revoke(self, services: Services) -> None:
        user = make_user(services)
        with Receiver() as app_endpoint:
            app = webhook_partner(services, app_endpoint.url)
            connection = add_connection(
                services, user.id, app.partner.id, metadata={"session": "s-1"}
            )
            with services.db.session() as session:
                row = session.get(Connection, connection.id)
                assert row is not None
                revoke_connection(session, row, now=services.clock.now())
            assert deliver(services) == 1
            [call] = app_endpoint.wait_for(1)
        assert check(services, call, app.webhook_key, bare=False) == {
            "notification_type": "oauth_authorization_revoke",
            "service_id": str(connection.id),
            "partner_metadata": {"session": "s-1"},
        }
        assert b"receipt_id" not in call.body
        assert orjson.loads(call.body)["service_id"] == str(connection.id)


class TestPublishedSchema:
    def test_every_notification_type_is_published(self, services: Services) -> None:
        """Each ``webhooks`` entry is a POST whose body is one of ``WebhookPayload``'s, and
        together they name every notification type."""
        document = create_app(services.settings).openapi()
        union = document["components"]["schemas"]["WebhookPayload"]["oneOf"]
        types = set()
        for entry in document["webhooks"].values():
            schema = entry["post"]["requestBody"]["content"]["application/json"]["schema"]
            assert schema in union
            body = document["components"]["schemas"][schema["$ref"].rsplit("/", 1)[1]]
            assert "notification_type" in body["required"]
            types.add(body["properties"]["notification_type"]["const"])
        assert len(document["webhooks"]) == len(union) == 6
        assert types == set(NotificationType)

    def test_the_schema_refuses_what_is_never_sent(self, services: Services) -> None:
        """A key the body always has, left out; a key left out when empty, sent as null; a
        wrong notification type: each fails, so the checks in ``check`` can fail."""
        body = {
            "notification_type": "oauth_authorization_revoke",
            "service_id": str(uuid.uuid4()),
        }
        check_published(services, body, bare=False)
        for wrong in (
            {"notification_type": "oauth_authorization_revoke"},
            {**body, "partner_metadata": None},
            {**body, "service_id": "not-a-uuid"},
            {**body, "notification_type": "card_removed"},
        ):
            with pytest.raises(ValidationError):
                check_published(services, wrong, bare=False)
