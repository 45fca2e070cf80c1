from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base
from kuitti.ids import new_id


class Connection(Base):
    """A user's OAuth connection to a partner application; its id is the ``service_id``.

    One active connection per user and partner: approving again updates the scopes and keeps the
    ``service_id``. Revoking sets ``revoked_at``; tokens check it on every request.
    """

    __tablename__ = "connections"
    __table_args__ = (
        Index(
            "uq_connections_active_user_partner",
            "user_id",
            "partner_id",
            unique=True,
            sqlite_where=text("revoked_at IS NULL"),
            postgresql_where=text("revoked_at IS NULL"),
        ),
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    user_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("users.id"), index=True)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    scope: Mapped[str] = mapped_column(String(200))
    partner_metadata: Mapped[dict[str, Any] | None] = mapped_column(JSON)
    created_at: Mapped[datetime]
    updated_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]

    @property
    def scopes(self) -> set[str]:
        return set(self.scope.split())

    @property
    def active(self) -> bool:
        return self.revoked_at is None


class AuthorizationCode(Base):
    """An authorization code (RFC 6749 §4.1.2), stored as the SHA-256 digest of the code.

    Single use: ``used_at`` is set atomically when it is exchanged; a second exchange fails and
    revokes the tokens issued from it (RFC 6749 §4.1.2, RFC 9700 §4.5).
    """

    __tablename__ = "oauth_authorization_codes"

    code_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id"), index=True)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    redirect_uri: Mapped[str] = mapped_column(String(2000))
    scope: Mapped[str] = mapped_column(String(200))
    code_challenge: Mapped[str | None] = mapped_column(String(128))
    created_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    used_at: Mapped[datetime | None]


class IssuedToken(Base):
    """Every access token issued, by its ``jti``: a token is valid only while its row and its
    connection are not revoked. ``code_hash`` ties it to the code it was exchanged for."""

    __tablename__ = "oauth_issued_tokens"

    jti: Mapped[str] = mapped_column(String(64), primary_key=True)
    connection_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("connections.id"), index=True)
    code_hash: Mapped[str | None] = mapped_column(String(64), index=True)
    scope: Mapped[str] = mapped_column(String(200))
    issued_at: Mapped[datetime]
    expires_at: Mapped[datetime]
    revoked_at: Mapped[datetime | None]


class SigningKey(Base):
    """A JWT signing key pair. Stored in the database so every instance signs and verifies with
    the same keys; the private key is sealed with the server secret. The newest key signs; all
    keys stay in the JWKS (and verify) until removed by an operator."""

    __tablename__ = "oauth_signing_keys"

    kid: Mapped[str] = mapped_column(String(100), primary_key=True)
    algorithm: Mapped[str] = mapped_column(String(10))
    public_jwk: Mapped[dict[str, Any]] = mapped_column(JSON)
    private_jwk_sealed: Mapped[str] = mapped_column(String(4000))
    created_at: Mapped[datetime]
