from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, LargeBinary, String, Text, text
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base


class ReceiptSigningKey(Base):
    """A receipt-signing key pair (``kuitti.signatures``), apart from the OAuth token keys.

    The newest key that is not retired signs. The private key is sealed with the server secret,
    never stored in clear. A retired key signs no more but stays published, marked retired,
    until ``published_until`` (the receipts' retention), so what it signed still verifies."""

    __tablename__ = "receipt_signing_keys"

    kid: Mapped[str] = mapped_column(String(100), primary_key=True)
    algorithm: Mapped[str] = mapped_column(String(10))
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSON)
    private_jwk_sealed: Mapped[str] = mapped_column(String(4000))
    created_at: Mapped[datetime]
    retired_at: Mapped[datetime | None] = mapped_column(default=None)
    published_until: Mapped[datetime | None] = mapped_column(default=None)


class ReceiptLogBatch(Base):
    """One batch of the receipt log (``kuitti.receipt_log``): the receipts one transaction
    stored, as the leaf hashes of their signatures in leaf order (``leaves``, 32 bytes each),
    and the root of the Merkle tree over them. A tree head claims it once (``head_seq``),
    where it is leaf ``head_index`` of the head's tree and ``head_path`` is its audit path
    there (32 bytes a hash). Only hashes: a batch outlives the receipts it lists."""

    __tablename__ = "receipt_log_batches"
    __table_args__ = (
        # The sealer's claim: only the batches no head holds yet are in this index.
        Index(
            "ix_receipt_log_batches_unsealed",
            "id",
            postgresql_where=text("head_seq IS NULL"),
            sqlite_where=text("head_seq IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True)
    created_at: Mapped[datetime]
    size: Mapped[int]
    root: Mapped[bytes] = mapped_column(LargeBinary)
    leaves: Mapped[bytes] = mapped_column(LargeBinary)
    head_seq: Mapped[int | None] = mapped_column(ForeignKey("receipt_log_heads.seq"), default=None)
    head_index: Mapped[int | None] = mapped_column(default=None)
    head_path: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)


class ReceiptLogHead(Base):
    """A signed tree head of the receipt log: the root of the Merkle tree over the roots of the
    batches it claimed (``tree_size`` of them, ``receipts`` receipts in all), chained to the
    head before it by that head's hash (``previous``), signed as a JWS (``jws``) with the
    receipt-signing key ``kid``."""

    __tablename__ = "receipt_log_heads"

    seq: Mapped[int] = mapped_column(primary_key=True, autoincrement=False)
    created_at: Mapped[datetime]
    tree_size: Mapped[int]
    receipts: Mapped[int]
    root: Mapped[bytes] = mapped_column(LargeBinary)
    previous: Mapped[bytes | None] = mapped_column(LargeBinary, default=None)
    kid: Mapped[str] = mapped_column(String(100))
    jws: Mapped[str] = mapped_column(Text)
