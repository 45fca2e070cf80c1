"""Helpers for webhook tests: drive the worker's step function, build partners and events."""

from __future__ import annotations

import asyncio
import dataclasses
import uuid
from typing import Any

from sqlalchemy import select

from kuitti.deps import Services
from kuitti.models import Connection, PartnerRole, WebhookDelivery
from kuitti.partners.service import NewPartner
from kuitti.webhooks.events import NotificationType, enqueue
from kuitti.webhooks.worker import deliver_due, make_client
from tests.factories import make_partner


def with_settings(services: Services, **changes: Any) -> Services:
    """The same database and clock under other settings (e.g. a short timeout)."""
    settings = services.settings.model_copy(update=changes)
    return dataclasses.replace(services, settings=settings)


def deliver(services: Services) -> int:
    """Run the worker's step once: send what is due, record the outcomes."""

    async def main() -> int:
        async with make_client(services.settings) as client:
            return await deliver_due(services, client)

    return asyncio.run(main())


def webhook_partner(
    services: Services, url: str, *roles: PartnerRole, name: str = "Pankkisovellus"
) -> NewPartner:
    return make_partner(services, *(roles or (PartnerRole.APP,)), name=name, webhook_url=url)


def add_connection(
    services: Services,
    user_id: uuid.UUID,
    partner_id: uuid.UUID,
    *,
    scope: str = "receipt:read",
    metadata: dict[str, Any] | None = None,
    revoked: bool = False,
) -> Connection:
    now = services.clock.now()
    with services.db.session() as session:
        connection = Connection(
            id=uuid.uuid4(),
            user_id=user_id,
            partner_id=partner_id,
            scope=scope,
            partner_metadata=metadata,
            created_at=now,
            updated_at=now,
            revoked_at=now if revoked else None,
        )
        session.add(connection)
    return connection


def queue(
    services: Services,
    partner: NewPartner,
    payload: dict[str, Any] | None = None,
    *,
    kind: NotificationType = NotificationType.RECEIPT,
    bare: bool = False,
) -> uuid.UUID:
    with services.db.session() as session:
        delivery = enqueue(
            session,
            partner.partner,
            kind,
            payload or {"notification_type": kind.value, "service_id": str(uuid.uuid4())},
            now=services.clock.now(),
            bare_authorization=bare,
        )
        assert delivery is not None
        return delivery.id


def delivery(services: Services, delivery_id: uuid.UUID) -> WebhookDelivery:
    with services.db.session(write=False) as session:
        row = session.scalar(select(WebhookDelivery).where(WebhookDelivery.id == delivery_id))
        assert row is not None
        session.expunge(row)
        return row
