from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import Any

from sqlalchemy import JSON, BigInteger, ForeignKey, Index, String, Text, false, text
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base, DocumentText
from kuitti.ids import new_id


class Receipt(Base):
    """A receipt exactly as posted (``document``) plus the service's own metadata.

    ``document_hash`` is the SHA-256 of the canonical JSON (sorted keys, no whitespace), so an
    unchanged resend is recognised whatever its key order. Only a receipt posted with RECEIPT_ID
    tokens can be resent, so only such a receipt gets one; the others keep it empty (earlier
    versions hashed every receipt). A stored document never changes.

    A return names the purchase it returns (``original_receipt_id``, linked at ingest by
    ``kuitti.posting.returns``); the purchase counts its returns (``return_count``), so its
    renderings and later deliveries know without a query whether there are any.
    """

    __tablename__ = "receipts"
    # A merchant names an original by its number and time: found through the merchant's
    # grants (``kuitti.posting.returns.numbered``), not an index of every receipt's number.
    __table_args__ = (
        # Partial: nearly every receipt names no original, and ingest then pays nothing for it.
        Index(
            "ix_receipts_original",
            "original_receipt_id",
            postgresql_where=text("original_receipt_id IS NOT NULL"),
            sqlite_where=text("original_receipt_id IS NOT NULL"),
        ),
        # The sandbox clean-up's range: only sandbox receipts are in this index.
        Index(
            "ix_receipts_sandbox_created",
            "created_at",
            sqlite_where=text("sandbox"),
            postgresql_where=text("sandbox"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"))
    document: Mapped[str] = mapped_column(DocumentText)
    document_hash: Mapped[str] = mapped_column(String(64))
    receipt_number: Mapped[str] = mapped_column(String(200))
    receipt_time: Mapped[datetime]
    # receiptTimeStamp exactly as posted (its own offset): the list shows it without parsing
    # every document of the page.
    receipt_timestamp: Mapped[str] = mapped_column(Text)
    merchant_name: Mapped[str] = mapped_column(String(500))
    total: Mapped[int] = mapped_column(BigInteger)
    currency: Mapped[str] = mapped_column(String(3))
    token_statuses: Mapped[list[dict[str, Any]]] = mapped_column(JSON, default=list)
    created_at: Mapped[datetime]
    original_receipt_id: Mapped[uuid.UUID | None] = mapped_column(
        ForeignKey("receipts.id"), default=None
    )
    return_count: Mapped[int] = mapped_column(default=0, server_default="0")
    # Posted by a sandbox partner: never delivered to a person, deleted after
    # KUITTI_SANDBOX_RETENTION_DAYS (docs/sandbox.md).
    sandbox: Mapped[bool] = mapped_column(default=False)
    # The detached JWS over ``document``'s UTF-8 bytes (``kuitti.signatures``), written with
    # the receipt; empty only for a receipt stored before signing until the backfill signs it.
    signature: Mapped[str | None] = mapped_column(Text, default=None)
    # The receipt log's batch that holds the hash of ``signature`` (``kuitti.receipt_log``):
    # written with the receipt. No foreign key: its check would cost every insert a probe.
    log_batch_id: Mapped[uuid.UUID | None] = mapped_column(default=None)

    @property
    def signed(self) -> bool:
        return self.signature is not None


class ReceiptLink(Base):
    """A RECEIPT_ID token: the receipt identifier is unique within its namespace.

    ``shareable``: the merchant marked the token ``"shareable": true``, so any number of
    accounts may import the receipt through this link; otherwise the first account to import
    it holds it (``ReceiptClaim``)."""

    __tablename__ = "receipt_links"

    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name"), primary_key=True)
    identifier: Mapped[str] = mapped_column(String(200), primary_key=True)
    receipt_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("receipts.id"), index=True)
    # A server default only: the ingest writer's batch inserts name no column it does not set.
    shareable: Mapped[bool] = mapped_column(server_default=false())


class ReceiptClaim(Base):
    """The account that holds a receipt reached through a namespace link, which a merchant's
    guessable identifier may expose to anyone (docs/security.md, "Namespace links"): written
    by the first import through a link that is not shareable, and never changed. The primary
    key makes the claim race-free: of two imports at once, one row wins."""

    __tablename__ = "receipt_claims"

    receipt_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("receipts.id"), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), index=True)
    claimed_at: Mapped[datetime]


class GrantReason(StrEnum):
    """How a partner came to read a receipt; all but ``POSTED`` last only as long as the source."""

    POSTED = "posted"
    CONNECTION = "connection"
    CARD = "card"


class ReceiptGrant(Base):
    """A partner may read this receipt: it posted it, or the receipt reached it through one of
    its users' connections (``connection_id``) or one of its cards or pilot cards (``card_id``).

    A grant through a connection holds while the connection is active; one through a card while
    the card is not removed and still has the holder it had then (``card_user_id``; an account
    deletion detaches the cards). The readers check that at read time
    (``kuitti.receipts.readers``), so a consent that ends cuts access at once, whoever ended it.
    One partner may hold several grants for one receipt (two of its users' connections, say).
    ``receipt_time`` is copied here so listing is one index range.

    Two indexes: the listing's (a partner's grants by time) and one by receipt, which serves
    the checks whether a partner may read given receipts (``receipt_id`` and ``partner_id``
    both in its condition) and deleting a receipt. A receipt has a grant or two, so one index
    by receipt does what a second by partner first did too (migration 0010)."""

    __tablename__ = "receipt_grants"
    __table_args__ = (
        Index("ix_receipt_grants_listing", "partner_id", "receipt_time", "receipt_id"),
        Index("ix_receipt_grants_receipt", "receipt_id", "partner_id"),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"))
    receipt_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("receipts.id"))
    receipt_time: Mapped[datetime]
    reason: Mapped[str] = mapped_column(String(32))
    connection_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("connections.id"))
    card_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("cards.id"))
    card_user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"))


class ReceiptDelivery(Base):
    """The receipt belongs to this service user. ``via`` says how it reached them."""

    __tablename__ = "receipt_deliveries"
    __table_args__ = (
        Index("ix_receipt_deliveries_listing", "user_id", "receipt_time", "receipt_id"),
        # The primary key leads with the user: deleting a receipt checks its foreign key here.
        Index("ix_receipt_deliveries_receipt", "receipt_id"),
    )

    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), primary_key=True)
    receipt_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("receipts.id"), primary_key=True)
    receipt_time: Mapped[datetime]
    via: Mapped[str] = mapped_column(String(32))
    created_at: Mapped[datetime]


class IdempotencyRecord(Base):
    """The first response to an ``Idempotency-Key``, replayed for the same key and body."""

    __tablename__ = "idempotency_records"
    # The retention's range (KUITTI_IDEMPOTENCY_RETENTION_DAYS, kuitti.housekeeping).
    __table_args__ = (Index("ix_idempotency_records_created", "created_at"),)

    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), primary_key=True)
    key: Mapped[str] = mapped_column(String(255), primary_key=True)
    request_hash: Mapped[str] = mapped_column(String(64))
    status_code: Mapped[int]
    response_body: Mapped[str] = mapped_column(Text)
    created_at: Mapped[datetime]
