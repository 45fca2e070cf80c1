"""The operator's view of the outbox: the delivery log and replays (``kuitti webhooks …``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.models import WebhookDelivery
from kuitti.models.outbox import DeliveryStatus
from kuitti.webhooks.events import WEBHOOKS


class UnknownDelivery(LookupError):
    """No delivery has that id."""


def _iso(moment: datetime | None) -> str | None:
    return moment.isoformat() if moment is not None else None


def delivery_json(delivery: WebhookDelivery) -> dict[str, Any]:
    """One entry of the delivery log (``kuitti webhooks list --json``)."""
    pending = delivery.status == DeliveryStatus.PENDING
    return {
        "delivery_id": str(delivery.id),
        "partner_id": str(delivery.partner_id),
        "notification_type": delivery.notification_type,
        "status": delivery.status,
        "attempts": [
            {
                "at": _iso(a.at),
                "status_code": a.status_code,
                "latency_ms": a.latency_ms,
                "error": a.error,
            }
            for a in sorted(delivery.attempts, key=lambda a: (a.at, a.id))
        ],
        "next_attempt_at": _iso(delivery.next_attempt_at) if pending else None,
    }


def list_deliveries(
    session: Session,
    *,
    partner_id: uuid.UUID | None = None,
    status: DeliveryStatus | None = None,
    limit: int = 100,
) -> list[WebhookDelivery]:
    """Newest first."""
    query = select(WebhookDelivery).order_by(WebhookDelivery.created_at.desc(), WebhookDelivery.id)
    if partner_id is not None:
        query = query.where(WebhookDelivery.partner_id == partner_id)
    if status is not None:
        query = query.where(WebhookDelivery.status == status)
    return list(session.scalars(query.limit(limit)))


def replay(session: Session, delivery_id: uuid.UUID, *, now: datetime) -> WebhookDelivery:
    """Make a delivery pending again, due now, with the same ``webhook-id`` and a fresh retry
    schedule. Earlier attempts stay in the log. A pending delivery is simply made due now."""
    delivery = session.get(WebhookDelivery, delivery_id, with_for_update=True)
    if delivery is None:
        raise UnknownDelivery(f"no webhook delivery {delivery_id}")
    if delivery.status != DeliveryStatus.PENDING:
        delivery.attempt_count = 0
        delivery.lease_expires_at = None
        delivery.lease_token = None
    delivery.status = DeliveryStatus.PENDING
    delivery.next_attempt_at = now
    delivery.delivered_at = None
    WEBHOOKS.announce(session)
    return delivery
