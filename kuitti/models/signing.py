from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, String
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
