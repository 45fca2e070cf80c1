from __future__ import annotations

import uuid
from datetime import datetime
from enum import StrEnum
from typing import NamedTuple

from sqlalchemy import JSON, ForeignKey, String
from sqlalchemy.orm import Mapped, mapped_column, relationship

from kuitti.db import Base
from kuitti.ids import new_id


class PartnerRole(StrEnum):
    MERCHANT = "merchant"
    APP = "app"
    CARD_ISSUER = "card_issuer"
    BANK_PILOT = "bank_pilot"


class Partner(Base):
    """A merchant, partner application, card issuer or pilot bank (one partner may be several)."""

    __tablename__ = "partners"

    id: Mapped[uuid.UUID] = mapped_column(primary_key=True, default=new_id)
    name: Mapped[str] = mapped_column(String(200))
    roles: Mapped[list[str]] = mapped_column(JSON)
    api_key_hash: Mapped[str] = mapped_column(String(64), unique=True)
    client_id: Mapped[str | None] = mapped_column(String(64), unique=True)
    client_secret_hash: Mapped[str | None] = mapped_column(String(64))
    public_client: Mapped[bool] = mapped_column(default=False)
    redirect_uris: Mapped[list[str]] = mapped_column(JSON, default=list)
    webhook_url: Mapped[str | None] = mapped_column(String(2000))
    webhook_key_sealed: Mapped[str | None] = mapped_column(String(500))
    attachments_enabled: Mapped[bool] = mapped_column(default=False)
    iban: Mapped[str | None] = mapped_column(String(34))
    bic: Mapped[str | None] = mapped_column(String(11))
    created_at: Mapped[datetime]
    # Set by `kuitti partner disable`: its keys, client credentials and tokens are refused and
    # its webhooks wait until it is enabled again.
    disabled_at: Mapped[datetime | None] = mapped_column(default=None)
    # A sandbox partner (docs/sandbox.md): its keys start kt_test_, and nothing it posts ever
    # reaches a person; it and production partners never see each other's data.
    sandbox: Mapped[bool] = mapped_column(default=False)
    # Days this partner's receipts are kept after their receipt time, where the law or the
    # contract differs from KUITTI_RECEIPT_RETENTION_DAYS (kuitti.retention); None: that.
    retention_days: Mapped[int | None] = mapped_column(default=None)

    # "expunge": a partner detached from the session that loaded it takes its namespaces along,
    # so the end of that session cannot expire them.
    namespaces: Mapped[list[Namespace]] = relationship(
        back_populates="partner",
        lazy="selectin",
        order_by="Namespace.position",
        cascade="save-update, merge, expunge",
    )

    def has_role(self, role: PartnerRole) -> bool:
        return role.value in self.roles

    @property
    def namespace_names(self) -> list[str]:
        return [ns.name for ns in self.namespaces]

    @property
    def id_policies(self) -> frozenset[IdPolicy]:
        return frozenset(ns.id_policy for ns in self.namespaces if ns.id_policy is not None)


class IdPolicy(NamedTuple):
    """What a namespace requires of its receipt identifiers (``kuitti.partners.idpolicy``):
    at least ``min_length`` characters, all from the named ``alphabet`` when one is set."""

    namespace: str
    min_length: int
    alphabet: str | None


class Namespace(Base):
    """A partner namespace for receipt links and dynamic QR codes; globally unique."""

    __tablename__ = "namespaces"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    partner_id: Mapped[uuid.UUID] = mapped_column(ForeignKey("partners.id"), index=True)
    position: Mapped[int] = mapped_column(default=0)
    # The receipt identifier policy (`kuitti partner update --id-policy`); none when null.
    id_min_length: Mapped[int | None] = mapped_column(default=None)
    id_alphabet: Mapped[str | None] = mapped_column(String(16), default=None)

    partner: Mapped[Partner] = relationship(back_populates="namespaces")

    @property
    def id_policy(self) -> IdPolicy | None:
        if self.id_min_length is None and self.id_alphabet is None:
            return None
        return IdPolicy(self.name, self.id_min_length or 0, self.id_alphabet)
