"""Partner API keys as the receipt ingest sees them: the key's digest, and what its partner may do.

``KeyHolder`` is a comparable snapshot of everything a receipt post depends on (the partner, its
roles, its namespaces, whether it may attach files). The ingest writer reads the partners of a
whole batch again inside the transaction that stores the batch and compares: a receipt whose
partner changed (key rotated, partner disabled, a role or namespace gone) is not stored, and its
request starts over with a fresh lookup. That is why ``KeyHolderCache`` may remember snapshots
without an expiry: it only saves the lookup before validation, never decides what is stored.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.errors import Forbidden, Unauthorized, UnsupportedMediaType
from kuitti.models import Namespace, Partner, PartnerRole
from kuitti.security import hash_secret

MISSING_KEY = "Send the partner API key as 'Authorization: Token <API_KEY>'."
INVALID_KEY = "The API key is not valid."
CACHED_KEY_HOLDERS = 1024


def api_key_from_header(authorization: str | None) -> str | None:
    """``Token <key>`` or the bare key; ``Bearer`` is a user token, not a partner key."""
    if not authorization:
        return None
    scheme, _, rest = authorization.strip().partition(" ")
    if rest and scheme.lower() == "token":
        return rest.strip() or None
    if rest:
        return None
    return scheme


def key_digest(authorization: str | None) -> str:
    """The digest of the partner key in ``authorization``; 401 when there is none."""
    key = api_key_from_header(authorization)
    if key is None:
        raise Unauthorized(MISSING_KEY)
    return hash_secret(key)


class HasRoles(Protocol):
    def has_role(self, role: PartnerRole) -> bool: ...


P = TypeVar("P", bound=HasRoles)


def require_role(partner: P, role: PartnerRole) -> P:
    if not partner.has_role(role):
        raise Forbidden(f"This API key's partner does not have the {role.value} role.")
    return partner


def require_json(content_type: str | None) -> None:
    """Refuse a body that is not declared as JSON (415)."""
    if (content_type or "").split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType("Send the body as Content-Type: application/json.")


@dataclass(frozen=True)
class KeyHolder:
    """The enabled partner of one API key, as far as posting a receipt depends on it."""

    id: uuid.UUID
    key_digest: str
    roles: frozenset[str]
    attachments_enabled: bool
    sandbox: bool
    namespaces: frozenset[str]

    @classmethod
    def of(cls, partner: Partner) -> KeyHolder:
        return cls(
            id=partner.id,
            key_digest=partner.api_key_hash,
            roles=frozenset(partner.roles),
            attachments_enabled=partner.attachments_enabled,
            sandbox=partner.sandbox,
            namespaces=frozenset(partner.namespace_names),
        )

    def has_role(self, role: PartnerRole) -> bool:
        return role.value in self.roles


def current_key_holders(session: Session, digests: set[str]) -> dict[str, KeyHolder]:
    """The key holders of these digests as the database has them now (enabled partners only);
    two queries, without loading the partners through the ORM."""
    rows = session.execute(
        select(
            Partner.id,
            Partner.api_key_hash,
            Partner.roles,
            Partner.attachments_enabled,
            Partner.sandbox,
        ).where(Partner.api_key_hash.in_(digests), Partner.disabled_at.is_(None))
    ).all()
    namespaces: dict[uuid.UUID, set[str]] = {row.id: set() for row in rows}
    if rows:
        for partner_id, name in session.execute(
            select(Namespace.partner_id, Namespace.name).where(Namespace.partner_id.in_(namespaces))
        ):
            namespaces[partner_id].add(name)
    return {
        row.api_key_hash: KeyHolder(
            id=row.id,
            key_digest=row.api_key_hash,
            roles=frozenset(row.roles),
            attachments_enabled=row.attachments_enabled,
            sandbox=row.sandbox,
            namespaces=frozenset(namespaces[row.id]),
        )
        for row in rows
    }


class KeyHolderCache:
    """Key holders by key digest, in one process; bounded, emptied when full."""

    def __init__(self, max_entries: int = CACHED_KEY_HOLDERS) -> None:
        self.max_entries = max_entries
        self._holders: dict[str, KeyHolder] = {}

    def get(self, digest: str) -> KeyHolder | None:
        return self._holders.get(digest)

    def put(self, holder: KeyHolder) -> None:
        if len(self._holders) >= self.max_entries:
            self._holders.clear()
        self._holders[holder.key_digest] = holder

    def forget(self, digest: str) -> None:
        self._holders.pop(digest, None)
