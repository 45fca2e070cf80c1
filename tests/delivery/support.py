"""Helpers for delivery tests: connected users with real access tokens, cards, mail rows."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

import httpx
from sqlalchemy import select

from kuitti.models import (
    Card,
    MailMessage,
    Partner,
    PartnerRole,
    ReceiptDelivery,
    User,
    WebhookDelivery,
)
from kuitti.oauth.tokens import issue_access_token
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from kuitti.users.service import create_user
from tests.factories import add_connection, auth, make_partner


@dataclass(frozen=True)
class Connected:
    """A service user connected to a partner app: its connection and a real access token."""

    user_id: uuid.UUID
    connection_id: uuid.UUID
    access_token: str
    app: NewPartner

    def app_headers(self) -> dict[str, str]:
        return {
            "SERVICE_APIKEY": self.app.api_key,
            "Authorization": f"Bearer {self.access_token}",
        }


def connect(
    services: Services, app: NewPartner, user: User, scope: str = "receipt:read receipt:write"
) -> Connected:
    now = services.clock.now()
    with services.db.session() as session:
        connection = add_connection(session, user.id, app.partner.id, now=now, scope=scope)
        session.flush()
        partner = session.get(Partner, app.partner.id)
        assert partner is not None
        token = issue_access_token(
            session, services.settings, connection, partner, code_hash=None, now=now
        )
    return Connected(user.id, connection.id, token, app)


def make_app(services: Services, name: str = "Kuittikansio", **options: Any) -> NewPartner:
    options.setdefault("namespaces", ["kansio"])
    options.setdefault("redirect_uris", ["https://app.example/callback"])
    return make_partner(services, PartnerRole.APP, name=name, **options)


def make_merchant(services: Services, name: str = "Kauppa Oy", **options: Any) -> NewPartner:
    options.setdefault("namespaces", ["kauppa"])
    return make_partner(services, PartnerRole.MERCHANT, name=name, **options)


def unverified_user(services: Services, email: str) -> User:
    with services.db.session() as session:
        return create_user(
            session, email, "correct horse 1", now=services.clock.now(), verified=False
        )


def enroll_card(
    services: Services,
    issuer: NewPartner,
    partner_card_id: str,
    masked_pan: str = "415301******1234",
    user_id: uuid.UUID | None = None,
) -> uuid.UUID:
    now = services.clock.now()
    with services.db.session() as session:
        card = Card(
            id=uuid.uuid4(),
            partner_id=issuer.partner.id,
            partner_card_id=partner_card_id,
            masked_pan=masked_pan,
            pan_first6=masked_pan[:6],
            pan_last4=masked_pan[-4:],
            exp_date=now + timedelta(days=800),
            holder_name=None,
            user_id=user_id,
            pilot=False,
            created_at=now,
            deleted_at=None,
        )
        session.add(card)
    return card.id


def post_receipt(
    client: httpx.Client, merchant: NewPartner, body: dict[str, Any]
) -> httpx.Response:
    return client.post("/api/v1/receipts/", json=body, headers=auth(merchant.api_key))


def owners(services: Services, receipt_id: str) -> list[uuid.UUID]:
    with services.db.session(write=False) as session:
        return list(
            session.scalars(
                select(ReceiptDelivery.user_id).where(
                    ReceiptDelivery.receipt_id == uuid.UUID(receipt_id)
                )
            )
        )


def mail_rows(services: Services) -> list[MailMessage]:
    with services.db.session(write=False) as session:
        return list(session.scalars(select(MailMessage).order_by(MailMessage.created_at)))


def webhooks(services: Services, notification_type: str) -> list[WebhookDelivery]:
    with services.db.session(write=False) as session:
        return list(
            session.scalars(
                select(WebhookDelivery).where(
                    WebhookDelivery.notification_type == notification_type
                )
            )
        )
