from __future__ import annotations

import uuid
from datetime import datetime

from sqlalchemy import ForeignKey, Index, String, text
from sqlalchemy.orm import Mapped, mapped_column

from kuitti.db import Base


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
    )

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=uuid.uuid4)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    partner_card_id: Mapped[str] = mapped_column(String(200))
    masked_pan: Mapped[str] = mapped_column(String(19))
    pan_first6: Mapped[str] = mapped_column(String(6))
    pan_last4: Mapped[str] = mapped_column(String(4))
    exp_date: Mapped[datetime]
    holder_name: Mapped[str | None] = mapped_column(String(200))
    user_id: Mapped[uuid.UUID | None] = mapped_column(ForeignKey("users.id"), index=True)
    pilot: Mapped[bool] = mapped_column(default=False)
    created_at: Mapped[datetime]
    deleted_at: Mapped[datetime | None]
