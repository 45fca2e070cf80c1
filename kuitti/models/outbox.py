"""The transactional outbox: webhook deliveries and e-mails are rows written in the same
transaction as the change that caused them; the worker sends them after commit."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import ClassVar

from sqlalchemy import CheckConstraint, ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from kuitti.db import Base
from kuitti.ids import new_id


class DeliveryStatus(StrEnum):
    """Where a webhook delivery stands."""

    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class MailStatus(StrEnum):
    """Where an e-mail stands."""

    PENDING = "pending"
    SENT = "sent"
    FAILED = "failed"


class OutboxRow:
    """The columns every outbox row has: its status, its retry state and the lease a worker
    holds while it sends it (``kuitti.outbox``)."""

    PENDING: ClassVar[str] = "pending"  # the status of a row waiting to be sent, in both outboxes

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id, sort_order=-1)
    status: Mapped[str] = mapped_column(String(16))
    attempt_count: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime]
    lease_expires_at: Mapped[datetime | None]
    lease_token: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime]


class WebhookDelivery(OutboxRow, Base):
    """One notification to one partner. Its id (as a UUID string) is the Standard Webhooks
    ``webhook-id``, the same on every attempt and replay. ``status`` is a ``DeliveryStatus``.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    notification_type: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    # Card-issuer webhooks carry the bare key in Authorization; the others 'Token <key>'.
    bare_authorization: Mapped[bool] = mapped_column(default=False)
    delivered_at: Mapped[datetime | None]

    attempts: Mapped[list[WebhookAttempt]] = relationship(
        back_populates="delivery", order_by="WebhookAttempt.at", lazy="selectin"
    )


class WebhookAttempt(Base):
    __tablename__ = "webhook_attempts"

    id: Mapped[int] = mapped_column(primary_key=True, autoincrement=True)
    delivery_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("webhook_deliveries.id"), index=True)
    at: Mapped[datetime]
    status_code: Mapped[int | None]
    latency_ms: Mapped[int]
    error: Mapped[str | None] = mapped_column(String(1000))

    delivery: Mapped[WebhookDelivery] = relationship(back_populates="attempts")


class MailMessage(OutboxRow, Base):
    """An e-mail waiting to be sent; ``status`` is a ``MailStatus``.

    Two kinds: a message written whole when it is queued (``subject`` and ``text_body``: the
    account e-mails), and a receipt e-mail (``receipt_id`` and ``receipt_link``), which the sender
    renders from the stored receipt when it sends, PDF attached, so the request that queued it
    renders nothing."""

    __tablename__ = "mail_messages"
    __table_args__ = (
        Index("ix_mail_messages_due", "status", "next_attempt_at"),
        CheckConstraint(
            "(receipt_id IS NOT NULL AND receipt_link IS NOT NULL)"
            " OR (subject IS NOT NULL AND text_body IS NOT NULL)",
            name="written_or_rendered",
        ),
    )

    to_address: Mapped[str] = mapped_column(String(320))
    subject: Mapped[str | None] = mapped_column(String(500))
    text_body: Mapped[str | None] = mapped_column(Text)
    html_body: Mapped[str | None] = mapped_column(Text)
    # Indexed: deleting a receipt checks its foreign key here.
    receipt_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("receipts.id"), index=True)
    receipt_link: Mapped[str | None] = mapped_column(Text)
    # A sandbox receipt's e-mail: always written as an .eml file, never handed to SMTP.
    sandbox: Mapped[bool] = mapped_column(default=False)
    last_error: Mapped[str | None] = mapped_column(String(1000))
    sent_at: Mapped[datetime | None]
