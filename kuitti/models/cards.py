"""Cards, card transactions and card-linking state (rules in ``docs/matching.md``).

Only masked PANs are ever stored. Matching reads these tables through composite B-tree indexes
whose leading columns are equalities (merchant id, amount) and whose last column is the time, so
every lookup is one bounded index range, whatever the table size.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base
from kuitti.ids import new_id


class Card(Base):
    """An enrolled payment card. Only the masked PAN is ever stored; its id is the
    ``service_card_id``."""

    __tablename__ = "cards"
    __table_args__ = (
        Index(
            "uq_cards_active_partner_card",
            "partner_id",
            "partner_card_id",
            unique=True,
            sqlite_where=text("deleted_at IS NULL"),
            postgresql_where=text("deleted_at IS NULL"),
        ),
        Index("ix_cards_last4", "pan_last4"),
        Index("ix_cards_partner_card_id", "partner_card_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    partner_card_id: Mapped[str] = mapped_column(String(200))
    masked_pan: Mapped[str] = mapped_column(String(19))
    pan_first6: Mapped[str] = mapped_column(String(6))
    pan_last4: Mapped[str] = mapped_column(String(4))
    exp_date: Mapped[datetime]
    holder_name: Mapped[str | None] = mapped_column(String(200))
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"), index=True)
    pilot: Mapped[bool] = mapped_column(default=False)
    # Enrolled by a sandbox issuer: matches only sandbox receipts, never has a holder account.
    sandbox: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]


class TransactionType(StrEnum):
    AUTH = "auth"
    CLEARING = "clearing"


class CardPurchase(Base):
    """One purchase of one card: an auth and its later clearing (either may be missing).

    ``authorization_code`` and ``reference_number`` are whatever its transactions carried (they
    never disagree: a clearing whose code differs from an auth's starts a purchase of its own).
    ``payment_id`` is the receipt payment it served; a purchase serves at most one. No foreign
    key: ``card_payments`` is partitioned by its receipt's month on PostgreSQL, a key to it
    would have to name the receipt, and each would make a month's drop read this table
    (``kuitti.partitions``); the drop frees the month's purchases first (``kuitti.retention``).
    """

    __tablename__ = "card_purchases"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    card_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("cards.id"), index=True)
    merchant_id: Mapped[str] = mapped_column(String(200))
    merchant_name: Mapped[str] = mapped_column(String(500))
    authorization_code: Mapped[str | None] = mapped_column(String(200))
    reference_number: Mapped[str | None] = mapped_column(String(200))
    payment_id: Mapped[uuid.UUID | None] = mapped_column(unique=True)
    created_at: Mapped[datetime]


class CardTransaction(Base):
    """An auth or clearing record reported by the card's issuer. ``amount`` is signed
    (a refund is a negative clearing)."""

    __tablename__ = "card_transactions"
    __table_args__ = (
        # Receipt payment → transactions: MID, amount and last four equal, time in a range.
        Index("ix_card_transactions_lookup", "merchant_id", "amount", "pan_last4", "occurred_at"),
        # A clearing looking for its auth among the same card's transactions.
        Index("ix_card_transactions_card", "card_id", "merchant_id", "occurred_at"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    card_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("cards.id"))
    purchase_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("card_purchases.id"), index=True)
    transaction_type: Mapped[str] = mapped_column(String(16))
    amount: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    occurred_at: Mapped[datetime]
    merchant_id: Mapped[str] = mapped_column(String(200))
    merchant_name: Mapped[str] = mapped_column(String(500))
    reference_number: Mapped[str | None] = mapped_column(String(200))
    authorization_code: Mapped[str | None] = mapped_column(String(200))
    # The card's last four digits, copied so the lookup index can include them.
    pan_last4: Mapped[str] = mapped_column(String(4))
    created_at: Mapped[datetime]


class PaymentStatus(StrEnum):
    WAITING = "waiting"
    MATCHED = "matched"
    EXPIRED = "expired"
    UNMATCHABLE = "unmatchable"


class CardPaymentRecord(Base):
    """One CARD payment of a stored receipt, with the keys matching looks it up by.

    ``paid_at`` is the payment's ``timeStamp`` (else the receipt's); ``settle_at`` is set while the
    payment has exactly one fitting card on keys alone and waits for the auth window to close;
    ``reason`` says, for ``kuitti receipts explain``, why it waits. A new payment waits for the
    matching worker in ``CardMatchingQueue``, not through ``settle_at``.
    """

    __tablename__ = "card_payments"
    __table_args__ = (
        # Transaction → waiting payments: MID and amount (or pre-authorised amount), time range.
        Index("ix_card_payments_lookup", "merchant_id", "amount", "pan_last4", "paid_at"),
        # Only pre-authorised payments (a fuel pump, a hotel): an entry for every payment would
        # land on a leaf page of its own, one more page written per receipt.
        Index(
            "ix_card_payments_preauth",
            "merchant_id",
            "pre_authorized_amount",
            "pan_last4",
            "paid_at",
            sqlite_where=text("pre_authorized_amount IS NOT NULL"),
            postgresql_where=text("pre_authorized_amount IS NOT NULL"),
        ),
        # Payments waiting for their auth window to close, globally and per merchant id. Only
        # the worker writes these: a new payment is queued in ``card_matching_queue`` instead.
        Index(
            "ix_card_payments_settle",
            "settle_at",
            sqlite_where=text("settle_at IS NOT NULL"),
            postgresql_where=text("settle_at IS NOT NULL"),
        ),
        Index(
            "ix_card_payments_mid_settle",
            "merchant_id",
            "settle_at",
            sqlite_where=text("settle_at IS NOT NULL"),
            postgresql_where=text("settle_at IS NOT NULL"),
        ),
        # Waiting payments by time, for expiry from the matching set.
        Index(
            "ix_card_payments_waiting",
            "paid_at",
            sqlite_where=text("status = 'waiting'"),
            postgresql_where=text("status = 'waiting'"),
        ),
        Index("uq_card_payments_receipt_index", "receipt_id", "payment_index", unique=True),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    receipt_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("receipts.id"))
    payment_index: Mapped[int]
    status: Mapped[str] = mapped_column(String(16))
    merchant_id: Mapped[str | None] = mapped_column(String(200))
    amount: Mapped[int] = mapped_column(BigInteger)
    pre_authorized_amount: Mapped[int | None] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    paid_at: Mapped[datetime]
    masked_pan: Mapped[str | None] = mapped_column(String(32))
    pan_last4: Mapped[str | None] = mapped_column(String(4))
    authorization_code: Mapped[str | None] = mapped_column(String(200))
    reference_number: Mapped[str | None] = mapped_column(String(200))
    settle_at: Mapped[datetime | None]
    reason: Mapped[dict[str, Any]] = mapped_column(JSON, default=dict)
    # The receipt's ``sandbox``: a payment fits only cards of its own kind.
    sandbox: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]

    # The ORM names a row by (id, receipt_id): on PostgreSQL the table is partitioned by the
    # receipt's month and its primary key is that pair, so an update finds the row's partition
    # from its WHERE instead of probing every month's (``kuitti.partitions``).
    __mapper_args__ = {"primary_key": [id, receipt_id]}  # noqa: RUF012


class CardMatchingQueue(Base):
    """A new CARD payment waiting for the matching worker, recorded in the receipt's transaction
    and deleted in the transaction that first decides the payment.

    A queue of its own, not ``settle_at`` = now: the receipt's transaction then adds one entry at
    the end of one small table instead of entries in both re-check indexes, whose pages are
    spread by merchant id, a page written for nearly every receipt. Payment ids are
    time-ordered, so the key is the arrival order (on SQLite the table is its key's B-tree and
    nothing else). No foreign key: a payment row is never deleted, and SQLite would look the
    payment up for every entry."""

    __tablename__ = "card_matching_queue"
    __table_args__ = ({"sqlite_with_rowid": False},)

    payment_id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    merchant_id: Mapped[str] = mapped_column(String(200))


class CardMatch(Base):
    """A receipt payment delivered to a card's holder, and why (``explanation``).

    ``purchase_id`` is null for a pilot card matched on its masked PAN alone (pilot banks report
    no transactions). ``payment_id`` is a payment of the receipt ``receipt_id``, with no foreign
    key for the reason ``CardPurchase`` gives; a month's drop deletes the month's matches first."""

    __tablename__ = "card_matches"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    payment_id: Mapped[uuid.UUID] = mapped_column(unique=True)
    receipt_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("receipts.id"), index=True)
    card_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("cards.id"), index=True)
    purchase_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("card_purchases.id"), unique=True
    )
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"))
    explanation: Mapped[dict[str, Any]] = mapped_column(JSON)
    matched_at: Mapped[datetime]
