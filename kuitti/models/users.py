from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import String
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base


class User(Base):
    """A service user (a consumer). E-mail addresses are stored lower-cased."""

    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))
    email_verified_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
