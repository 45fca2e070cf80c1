"""Who is calling with a partner API key: the key's digest, and its ``KeyHolder``.

There is one way to authenticate a partner key: ``key_holder`` (one request's key) or
``current_key_holders`` (a batch's keys), both one prebuilt statement on the key digest's index,
the partner's namespaces joined in. Every route asks the database on every request, so a key
rotated or a partner disabled (by the operator, from any process) is refused by the very next
request; the receipt reads even check the key in the statement that reads
(``kuitti.receipts.readers``).

The one exception is the receipt post, the hot write path: ``KeyHolderCache`` remembers holders
without an expiry, to save the lookup before validation. That is safe only because a
``KeyHolder`` is a comparable snapshot of everything a post depends on (the partner, its roles,
its namespaces, whether it may attach files): the ingest writer looks the holders of a whole
batch up again inside the transaction that stores it and compares, so a receipt whose partner
changed is not stored and its request starts over with a fresh lookup. The cache saves work;
it never decides what is stored.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Protocol, TypeVar

from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from kuitti.db import Database, database_of
from kuitti.errors import Forbidden, Unauthorized, UnsupportedMediaType
from kuitti.models import IdPolicy, Namespace, Partner, PartnerRole
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
    """The enabled partner of one API key, as far as its callers depend on it."""

    id: uuid.UUID
    key_digest: str
    roles: frozenset[str]
    attachments_enabled: bool
    sandbox: bool
    namespace_names: frozenset[str]
    # The receipt identifier policies of its namespaces that have one (kuitti.delivery.idpolicy).
    id_policies: frozenset[IdPolicy] = frozenset()

    def has_role(self, role: PartnerRole) -> bool:
        return role.value in self.roles


# Built once: every authenticated request runs it. One row per namespace (at least one row).
_KEY_HOLDER = (
    select(
        Partner.id,
        Partner.api_key_hash,
        Partner.roles,
        Partner.attachments_enabled,
        Partner.sandbox,
        Namespace.name,
        Namespace.id_min_length,
        Namespace.id_alphabet,
    )
    .outerjoin(Namespace, Namespace.partner_id == Partner.id)
    .where(
        Partner.api_key_hash == bindparam("digest"),
        Partner.disabled_at.is_(None),
    )
)


def current_key_holders(session: Session, digests: set[str]) -> dict[str, KeyHolder]:
    """The key holders of these digests as the database has them now (enabled partners only),
    one prebuilt statement per digest (a batch's posts nearly always share one key), run on the
    driver in ``session``'s transaction."""
    db = database_of(session)
    holders: dict[str, KeyHolder] = {}
    for digest in digests:
        rows = db.session_rows(session, _KEY_HOLDER, {"digest": digest})
        if rows:
            partner_id, _, roles, attachments_enabled, sandbox, *_ = rows[0]
            holders[digest] = KeyHolder(
                id=partner_id,
                key_digest=digest,
                roles=frozenset(roles),
                attachments_enabled=attachments_enabled,
                sandbox=sandbox,
                namespace_names=frozenset(row[5] for row in rows if row[5] is not None),
                id_policies=frozenset(
                    IdPolicy(row[5], row[6] or 0, row[7])
                    for row in rows
                    if row[6] is not None or row[7] is not None
                ),
            )
    return holders


def holder_of_digest(session: Session, digest: str) -> KeyHolder | None:
    return current_key_holders(session, {digest}).get(digest)


def look_up_holder(db: Database, digest: str) -> KeyHolder | None:
    """``holder_of_digest`` in a read session of its own, for callers that hold none."""
    with db.session(write=False) as session:
        return holder_of_digest(session, digest)


def key_holder(session: Session, authorization: str | None) -> KeyHolder:
    """The holder of the partner key in ``authorization`` (``Token <key>`` or the bare key);
    401 when there is no key or no enabled partner holds it."""
    holder = holder_of_digest(session, key_digest(authorization))
    if holder is None:
        raise Unauthorized(INVALID_KEY)
    return holder


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
