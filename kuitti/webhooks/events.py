"""Writing notifications into the outbox, in the caller's transaction.

Bodies are exactly the interface's tables. Nothing is sent here: the worker sends rows after the
transaction that wrote them has committed, so a rolled-back change notifies nobody and a crash
after commit loses nothing.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from sqlalchemy import event, text
from sqlalchemy.orm import Session

from kuitti.models import Connection, Partner, WebhookDelivery
from kuitti.models.outbox import DeliveryStatus


class NotificationType(StrEnum):
    RECEIPT = "receipt_notification"
    TRANSACTION = "transaction_notification"
    OAUTH_REVOKE = "oauth_authorization_revoke"
    FULL_RECEIPT = "full_receipt_notification"
    CARD_ADDED = "card_added"


# Workers wake as soon as a transaction that queued a webhook commits: in the same process
# through these callbacks, in other processes through PostgreSQL's NOTIFY (which the database
# delivers only when the transaction commits, so a rolled-back change wakes nobody).
WAKE_CHANNEL = "kuitti_webhooks"
_QUEUED = "kuitti.webhooks.queued"
_wake_callbacks: set[Callable[[], None]] = set()
_wake_lock = threading.Lock()


def subscribe_wakeups(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` (from any thread) after each commit that queued a webhook; returns the
    function that unsubscribes."""
    with _wake_lock:
        _wake_callbacks.add(callback)

    def unsubscribe() -> None:
        with _wake_lock:
            _wake_callbacks.discard(callback)

    return unsubscribe


def wake_workers() -> None:
    """Tell this process's workers to look for due deliveries now (after moving a test clock,
    say)."""
    with _wake_lock:
        callbacks = list(_wake_callbacks)
    for callback in callbacks:
        callback()


def announce(session: Session) -> None:
    """Mark the session's transaction as one that queued a delivery; workers wake on commit."""
    if session.info.get(_QUEUED):
        return
    session.info[_QUEUED] = True
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"NOTIFY {WAKE_CHANNEL}"))


@event.listens_for(Session, "after_commit")
def _wake_after_commit(session: Session) -> None:
    if session.info.pop(_QUEUED, False):
        wake_workers()


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    session.info.pop(_QUEUED, None)


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
        status=DeliveryStatus.PENDING,
        attempt_count=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(delivery)
    announce(session)
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
