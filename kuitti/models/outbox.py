"""The transactional outbox: webhook deliveries and e-mails are rows written in the same
transaction as the change that caused them; the worker sends them after commit."""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum

from sqlalchemy import ForeignKey, Index, String, Text
from sqlalchemy.orm import Mapped, mapped_column, relationship

from kuitti.db import Base


class DeliveryStatus(StrEnum):
    PENDING = "pending"
    DELIVERED = "delivered"
    FAILED = "failed"


class WebhookDelivery(Base):
    """One notification to one partner. Its id (as a UUID string) is the Standard Webhooks
    ``webhook-id``, the same on every attempt and replay.

    A worker claims a due row by setting ``lease_expires_at`` and a fresh ``lease_token``; another
    worker leaves it alone until the lease expires, and the claimer records its outcome only while
    the token is still its own.
    """

    __tablename__ = "webhook_deliveries"
    __table_args__ = (Index("ix_webhook_deliveries_due", "status", "next_attempt_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    notification_type: Mapped[str] = mapped_column(String(64))
    payload: Mapped[str] = mapped_column(Text)
    # Card-issuer webhooks carry the bare key in Authorization; the others 'Token <key>'.
    bare_authorization: Mapped[bool] = mapped_column(default=False)
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempt_count: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime]
    lease_expires_at: Mapped[datetime | None]
    lease_token: Mapped[str | None] = mapped_column(String(32))
    created_at: Mapped[datetime]
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


class MailMessage(Base):
    """An e-mail waiting to be sent. ``receipt_pdf_id`` asks the sender to attach that receipt's
    PDF (rendered at send time, not in the request)."""

    __tablename__ = "mail_messages"
    __table_args__ = (Index("ix_mail_messages_due", "status", "next_attempt_at"),)

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    to_address: Mapped[str] = mapped_column(String(320))
    subject: Mapped[str] = mapped_column(String(500))
    text_body: Mapped[str] = mapped_column(Text)
    html_body: Mapped[str | None] = mapped_column(Text)
    receipt_pdf_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("receipts.id"))
    status: Mapped[str] = mapped_column(String(16), default="pending")
    attempt_count: Mapped[int] = mapped_column(default=0)
    next_attempt_at: Mapped[datetime]
    lease_expires_at: Mapped[datetime | None]
    last_error: Mapped[str | None] = mapped_column(String(1000))
    created_at: Mapped[datetime]
    sent_at: Mapped[datetime | None]
