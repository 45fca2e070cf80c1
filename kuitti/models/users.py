from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base
from kuitti.ids import new_id


class User(Base):
    """A service user (a consumer). E-mail addresses are stored lower-cased.

    A deleted account keeps its row (connections and deliveries refer to it) with the personal
    data removed: the address is replaced and ``deleted_at`` set."""

    __tablename__ = "users"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    email: Mapped[str] = mapped_column(String(320), unique=True)
    password_hash: Mapped[str] = mapped_column(String(200))
    email_verified_at: Mapped[datetime | None]
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]


class UserSession(Base):
    """A login session; the cookie carries a random token, the table only its SHA-256 digest."""

    __tablename__ = "user_sessions"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), index=True)
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]


class UserToken(Base):
    """A single-use token sent by e-mail (address verification or password reset), stored as the
    SHA-256 digest of the token."""

    __tablename__ = "user_tokens"

    token_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), index=True)
    purpose: Mapped[str] = mapped_column(String(20))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class LoginThrottle(Base):
    """Failed logins per key (a digest of the e-mail address or of the client address) in the
    current window; a key over its limit is refused without checking the password."""

    __tablename__ = "login_throttles"

    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    failures: Mapped[int] = mapped_column(default=0)
    window_started_at: Mapped[datetime]
