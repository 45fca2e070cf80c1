from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import JSON, ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base


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

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
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
