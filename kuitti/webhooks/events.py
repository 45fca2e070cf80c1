"""Writing notifications into the outbox, in the caller's transaction.

Bodies are the models of ``kuitti.webhooks.payloads``. Nothing is sent here: the worker sends
rows after the transaction that wrote them has committed, so a rolled-back change notifies nobody
and a crash after commit loses nothing.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from datetime import datetime

from sqlalchemy import event, text
from sqlalchemy.orm import Session

from kuitti.models import Connection, Partner, WebhookDelivery
from kuitti.models.outbox import DeliveryStatus
from kuitti.webhooks.payloads import WebhookPayload

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
    session: Session, partner: Partner, payload: WebhookPayload, *, now: datetime
) -> WebhookDelivery | None:
    """Queue one webhook for a partner; partners without a webhook URL get none. The body is
    fixed now; the URL and key are read at each attempt."""
    if not partner.webhook_url:
        return None
    delivery = WebhookDelivery(
        id=uuid.uuid4(),
        partner_id=partner.id,
        notification_type=payload.notification_type.value,
        payload=payload.body().decode(),
        bare_authorization=payload.BARE_AUTHORIZATION,
        status=DeliveryStatus.PENDING,
        attempt_count=0,
        next_attempt_at=now,
        created_at=now,
    )
    session.add(delivery)
    announce(session)
    return delivery


def notify_connection(
    session: Session, connection: Connection, payload: WebhookPayload, *, now: datetime
) -> WebhookDelivery | None:
    """Queue a webhook to the partner application of ``connection``."""
    partner = session.get(Partner, connection.partner_id)
    assert partner is not None
    return enqueue(session, partner, payload, now=now)
