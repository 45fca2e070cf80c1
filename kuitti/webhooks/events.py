"""Writing notifications into the outbox, in the caller's transaction.

Bodies are exactly the interface's tables. Nothing is sent here: the worker sends rows after the
transaction that wrote them has committed, so a rolled-back change notifies nobody and a crash
after commit loses nothing.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from sqlalchemy.orm import Session

from kuitti.models import Connection, Partner, WebhookDelivery


class NotificationType(StrEnum):
    RECEIPT = "receipt_notification"
    TRANSACTION = "transaction_notification"
    OAUTH_REVOKE = "oauth_authorization_revoke"
    FULL_RECEIPT = "full_receipt_notification"
    CARD_ADDED = "card_added"


def enqueue(
    session: Session,
    partner: Partner,
    notification_type: NotificationType,
    payload: dict[str, Any],
    *,
    now: datetime,
    bare_authorization: bool = False,
) -> WebhookDelivery | None:
    """Queue one webhook for a partner; partners without a webhook URL get none.

    ``bare_authorization``: card-issuer webhooks send ``Authorization: <key>`` rather than
    ``Token <key>``."""
    if not partner.webhook_url:
        return None
    delivery = WebhookDelivery(
        id=uuid.uuid4(),
        partner_id=partner.id,
        notification_type=notification_type.value,
        payload=orjson.dumps(payload).decode(),
        bare_authorization=bare_authorization,
        status="pending",
        attempt_count=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(delivery)
    return delivery


def connection_payload(
    connection: Connection, notification_type: NotificationType, **fields: Any
) -> dict[str, Any]:
    """The body of a partner-application webhook about one connection."""
    payload: dict[str, Any] = {"notification_type": notification_type.value}
    payload["service_id"] = str(connection.id)
    payload.update(fields)
    if connection.partner_metadata:
        payload["partner_metadata"] = connection.partner_metadata
    return payload


def notify_connection(
    session: Session,
    connection: Connection,
    notification_type: NotificationType,
    *,
    now: datetime,
    **fields: Any,
) -> WebhookDelivery | None:
    partner = session.get(Partner, connection.partner_id)
    assert partner is not None
    payload = connection_payload(connection, notification_type, **fields)
    return enqueue(session, partner, notification_type, payload, now=now)
