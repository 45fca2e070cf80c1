"""Helpers for card-linking tests: an issuer, a merchant and a card holder, and plain functions
that post cards, transactions and receipts through the real HTTP API."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
from sqlalchemy import select

from kuitti.cards.explain import explain_receipt
from kuitti.cards.service import check_card_request, enroll_card
from kuitti.cards.settler import settle_due_matches
from kuitti.clock import FrozenClock
from kuitti.models import (
    Card,
    Connection,
    PartnerRole,
    ReceiptDelivery,
    ReceiptGrant,
    User,
    WebhookDelivery,
)
from kuitti.models.cards import CardMatch, CardMatchingQueue
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.factories import (
    add_connection,
    auth,
    card_payment,
    make_partner,
    make_user,
    receipt_doc,
)

HOOK = "http://127.0.0.1:9/hook"
PAID_AT = datetime(2026, 1, 15, 12, 3, 11, tzinfo=UTC)  # card_payment()'s default timeStamp
MID = "MID-000123"
PAN = "415301******1234"
AUTH_CODE = "A1B2C3"
REFERENCE = "260115140311"


def iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


@dataclass
class World:
    services: Services
    client: httpx.Client
    issuer: NewPartner
    merchant: NewPartner
    user: User
    clock: FrozenClock

    # cards ------------------------------------------------------------------------------------

    def enroll(
        self,
        partner_card_id: str = "card-1",
        masked_pan: str = PAN,
        *,
        issuer: NewPartner | None = None,
        exp_date: str = "2028-12",
        user: User | None = None,
        **extra: Any,
    ) -> str:
        """Enrol a card (through the API) and return its service_card_id; link it to ``user``
        (the default holder unless ``user=None`` is meant: pass ``link=False``)."""
        link = extra.pop("link", True)
        body = {"partner_card_id": partner_card_id, "masked_pan": masked_pan, "exp_date": exp_date}
        body.update(extra)
        answer = self.client.post(
            "/api/v1/cards/", json=body, headers=auth((issuer or self.issuer).api_key)
        )
        assert answer.status_code == 200, answer.text
        card_id: str = answer.json()["service_card_id"]
        holder = user or (self.user if link else None)
        if holder is not None:
            with self.services.db.session() as session:
                card = session.get(Card, uuid.UUID(card_id))
                assert card is not None
                card.user_id = holder.id
        return card_id

    def pilot_bank(
        self, masked_pan: str = PAN, name: str | None = None, *, webhook_url: str = HOOK
    ) -> NewPartner:
        """A pilot bank (webhook at ``webhook_url``) with one pilot card, enrolled directly."""
        bank = make_partner(
            self.services, PartnerRole.BANK_PILOT, name="Pilot Bank", webhook_url=webhook_url
        )
        with self.services.db.session() as session:
            enroll_card(
                session,
                bank.partner,
                check_card_request("pilot-1", masked_pan, "2028-12", name),
                now=self.clock.now(),
                pilot=True,
            )
        return bank

    def transaction(
        self,
        partner_card_id: str | None = "card-1",
        *,
        issuer: NewPartner | None = None,
        at: datetime = PAID_AT,
        amount: int = 849,
        kind: str = "auth",
        expect: int = 200,
        **extra: Any,
    ) -> dict[str, Any]:
        body: dict[str, Any] = {
            "partner_card_id": partner_card_id,
            "transaction_type": kind,
            "amount": amount,
            "currency": "EUR",
            "timestamp": iso(at),
            "merchant_id": MID,
            "merchant_name": "Kauppa Kamppi",
        }
        body.update(extra)
        body = {k: v for k, v in body.items() if v is not None}
        answer = self.client.post(
            "/api/v1/card-transactions/", json=body, headers=auth((issuer or self.issuer).api_key)
        )
        assert answer.status_code == expect, answer.text
        data: dict[str, Any] = answer.json()
        return data

    # receipts ---------------------------------------------------------------------------------

    def receipt(
        self, doc: dict[str, Any] | None = None, *, match: bool = True, **payment: Any
    ) -> str:
        """Post a receipt (default: one card payment of the total, ``payment`` overriding its
        attributes; a value None removes the attribute), then run the matching worker's step as
        the worker does after the commit (``match=False``: leave its payments pending)."""
        if doc is None:
            doc = receipt_doc()
            attrs = doc["payments"][0]["attributes"]
            for key, value in payment.items():
                if value is None:
                    attrs.pop(key, None)
                else:
                    attrs[key] = value
        answer = self.client.post(
            "/api/v1/receipts/", json=doc, headers=auth(self.merchant.api_key)
        )
        assert answer.status_code == 200, answer.text
        receipt_id: str = answer.json()["receipt_id"]
        if match:
            self.settle()
        return receipt_id

    def settle(self) -> int:
        """The matching worker's step (``run_settler`` runs it on every commit that recorded
        card payments, and every 30 s)."""
        return settle_due_matches(self.services)

    # what happened ----------------------------------------------------------------------------

    def owners(self, receipt_id: str) -> set[uuid.UUID]:
        with self.services.db.session(write=False) as session:
            return set(
                session.scalars(
                    select(ReceiptDelivery.user_id).where(
                        ReceiptDelivery.receipt_id == uuid.UUID(receipt_id)
                    )
                )
            )

    def readers(self, receipt_id: str) -> set[uuid.UUID]:
        with self.services.db.session(write=False) as session:
            return set(
                session.scalars(
                    select(ReceiptGrant.partner_id).where(
                        ReceiptGrant.receipt_id == uuid.UUID(receipt_id)
                    )
                )
            )

    def matches(self, receipt_id: str | None = None) -> list[CardMatch]:
        with self.services.db.session(write=False) as session:
            query = select(CardMatch).order_by(CardMatch.matched_at)
            if receipt_id is not None:
                query = query.where(CardMatch.receipt_id == uuid.UUID(receipt_id))
            return list(session.scalars(query))

    def matched_card(self, receipt_id: str) -> str | None:
        found = self.matches(receipt_id)
        assert len(found) <= 1
        return str(found[0].card_id) if found else None

    def queued(self) -> set[uuid.UUID]:
        """The payments in the matching worker's queue."""
        with self.services.db.session(write=False) as session:
            return set(session.scalars(select(CardMatchingQueue.payment_id)))

    def explain(self, receipt_id: str) -> dict[str, Any]:
        with self.services.db.session(write=False) as session:
            return explain_receipt(session, uuid.UUID(receipt_id), self.services.clock.now())

    def why(self, receipt_id: str, index: int = 0) -> str:
        reason = self.explain(receipt_id)["card_payments"][index]["reason"]
        why: str = reason["why"]
        return why

    def webhooks(self, notification_type: str) -> list[dict[str, Any]]:
        with self.services.db.session(write=False) as session:
            rows = session.scalars(
                select(WebhookDelivery)
                .where(WebhookDelivery.notification_type == notification_type)
                .order_by(WebhookDelivery.created_at)
            )
            return [
                {
                    "partner_id": r.partner_id,
                    "bare": r.bare_authorization,
                    "body": orjson.loads(r.payload),
                }
                for r in rows
            ]

    def later(self, **delta: float) -> None:
        self.clock.advance(timedelta(**delta).total_seconds())


def make_world(services: Services, client: httpx.Client, clock: FrozenClock) -> World:
    issuer = make_partner(services, PartnerRole.CARD_ISSUER, name="Pankki Oyj", webhook_url=HOOK)
    merchant = make_partner(services, PartnerRole.MERCHANT, name="Kauppa Oy")
    user = make_user(services, "maija@example.com")
    return World(services, client, issuer, merchant, user, clock)


def connect_app(
    services: Services, user: User, *, metadata: dict[str, str] | None = None
) -> tuple[NewPartner, Connection]:
    """A partner app with a webhook and the user's active receipt:read connection to it."""
    app = make_partner(services, PartnerRole.APP, name="Kuittisovellus", webhook_url=HOOK)
    now = services.clock.now()
    with services.db.session() as session:
        connection = add_connection(session, user.id, app.partner.id, now=now, metadata=metadata)
    return app, connection


def two_card_payments(first: dict[str, Any], second: dict[str, Any]) -> dict[str, Any]:
    doc = receipt_doc()
    total = doc["totalPriceIncVAT"]
    doc["payments"] = [
        card_payment(500, **first),
        card_payment(total - 500, **second),
    ]
    return doc


def race(*calls: Callable[[], Any]) -> list[Any]:
    """Run the calls on threads released together; their results in order."""
    barrier = threading.Barrier(len(calls))
    answers: list[Any] = [None] * len(calls)

    def run(i: int) -> None:
        barrier.wait()
        answers[i] = calls[i]()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(len(calls))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert all(a is not None for a in answers)
    return [a for a in answers if a is not None]
