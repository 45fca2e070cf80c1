"""Writing notifications into the outbox, in the caller's transaction.

Bodies are the models of ``kuitti.webhooks.payloads``. Nothing is sent here: the worker sends
rows after the transaction that wrote them has committed, so a rolled-back change notifies nobody
and a crash after commit loses nothing.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from kuitti.ids import new_id
from kuitti.models import Connection, Partner, WebhookDelivery
from kuitti.models.outbox import DeliveryStatus
from kuitti.wakeups import CommitWakeup
from kuitti.webhooks.payloads import WebhookPayload

# Workers wake as soon as a transaction that queued a webhook commits (``kuitti.wakeups``).
WEBHOOKS = CommitWakeup("kuitti_webhooks")


def enqueue(
    session: Session, partner: Partner, payload: WebhookPayload, *, now: datetime
) -> WebhookDelivery | None:
    """Queue one webhook for a partner; partners without a webhook URL get none. The body is
    fixed now; the URL and key are read at each attempt."""
    if not partner.webhook_url:
        return None
    delivery = WebhookDelivery(
        id=new_id(),
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
    WEBHOOKS.announce(session)
    return delivery


def notify_connection(
    session: Session, connection: Connection, payload: WebhookPayload, *, now: datetime
) -> WebhookDelivery | None:
    """Queue a webhook to the partner application of ``connection``."""
    partner = session.get(Partner, connection.partner_id)
    assert partner is not None
    return enqueue(session, partner, payload, now=now)
