"""Dynamic QR code values: short-lived codes an app shows for its connection, which a merchant
posts back as a ``DYNAMIC_QR_CODE`` token. Only a hash of each value is stored."""

from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base


class DynamicQrCode(Base):
    """One value handed out by ``POST /api/v1/qr-codes/``; ``value_hash`` is its SHA-256."""

    __tablename__ = "dynamic_qr_codes"

    value_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id"), index=True)
    namespace: Mapped[str] = mapped_column(ForeignKey("namespaces.name"))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime] = mapped_column(index=True)
