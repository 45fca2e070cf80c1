"""Who is calling with a partner's credentials: one parse of the request's headers
(``Credentials``), the role rule (``require_role``), and the rule "an enabled partner holds this
key digest" (``holds_the_key``), which every lookup of a key uses, the receipt reads folding it
into the statement that reads (``kuitti.receipts.readers``).

A key is looked up by ``key_holder`` (one request's key) or ``current_key_holders`` (a batch's
keys), both one prebuilt statement on the key digest's index, the partner's namespaces joined
in. Every route asks the database on every request, so a key rotated or a partner disabled (by
the operator, from any process) is refused by the very next request.

The one exception is the receipt post, the hot write path: ``KeyHolderCache`` remembers holders
without an expiry, to save the lookup before validation. That is safe only because a
``KeyHolder`` is a comparable snapshot of everything a post depends on (the partner, its roles,
its namespaces, whether it may attach files): the ingest writer looks the holders of a whole
batch up again inside the transaction that stores it and compares, so a receipt whose partner
changed is not stored and its request starts over with a fresh lookup. The cache saves work;
it never decides what is stored.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from sqlalchemy import ColumnElement, and_, bindparam, select
from sqlalchemy.orm import Session

from kuitti.db import Database, Read, database_of
from kuitti.errors import Forbidden, Unauthorized, UnsupportedMediaType
from kuitti.models import IdPolicy, Namespace, Partner, PartnerRole
from kuitti.security import hash_secret

MISSING_KEY = "Send the partner API key as 'Authorization: Token <API_KEY>'."
INVALID_KEY = "The API key is not valid."
CACHED_KEY_HOLDERS = 1024


def _scheme_and_credential(authorization: str) -> tuple[str, str]:
    """``Authorization``'s scheme and what follows it, both stripped: the one parse of it."""
    scheme, _, rest = authorization.strip().partition(" ")
    return scheme, rest.strip()


def api_key_from_header(authorization: str | None) -> str | None:
    """``Token <key>`` or the bare key; ``Bearer`` is a user token, not a partner key."""
    if not authorization:
        return None
    scheme, rest = _scheme_and_credential(authorization)
    if not rest:
        return scheme
    return rest if scheme.lower() == "token" else None


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, rest = _scheme_and_credential(authorization)
    return rest if scheme.lower() == "bearer" and rest else None


def app_key_of(headers: Mapping[str, str]) -> str | None:
    return headers.get("service_apikey") or headers.get("service-apikey")


class KeyHeader(enum.Enum):
    """Where a partner's API key may be sent."""

    AUTHORIZATION = "Authorization"  # ``Token <key>`` or the bare key
    APP_KEY = "SERVICE_APIKEY"  # a partner app's key, beside a user's ``Bearer`` token


@dataclass(frozen=True, slots=True)
class Credentials:
    """What a request presents: its ``Authorization`` header (a partner key, or a user's Bearer
    token) and its app key (``SERVICE_APIKEY``, or ``Service-Apikey``: proxies such as nginx
    drop header names with underscores by default, so both work)."""

    authorization: str | None
    app_key: str | None = None

    @classmethod
    def of(cls, headers: Mapping[str, str]) -> Credentials:
        return cls(headers.get("authorization"), app_key_of(headers))

    @property
    def bearer(self) -> str | None:
        """The user's token of ``Authorization: Bearer <token>``, else None."""
        return bearer_token(self.authorization)

    def key(self, *where: KeyHeader) -> str | None:
        """The partner key of the first header of ``where`` that is sent (an ``Authorization``
        that holds a Bearer token does not count), else None."""
        for header in where:
            if header is KeyHeader.AUTHORIZATION:
                if self.authorization and self.bearer is None:
                    return api_key_from_header(self.authorization)
            elif self.app_key:
                return api_key_from_header(self.app_key)
        return None

    def key_digest(self, *where: KeyHeader) -> str:
        """The digest of ``key(*where)``; 401 when there is none."""
        key = self.key(*where)
        if key is None:
            raise Unauthorized(MISSING_KEY)
        return hash_secret(key)


def key_digest(authorization: str | None) -> str:
    """The digest of the partner key in ``authorization``; 401 when there is none."""
    return Credentials(authorization).key_digest(KeyHeader.AUTHORIZATION)


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
    # The receipt identifier policies of its namespaces that have one (kuitti.partners.idpolicy).
    id_policies: frozenset[IdPolicy] = frozenset()

    def has_role(self, role: PartnerRole) -> bool:
        return role.value in self.roles


def holds_the_key(partner: type[Partner]) -> ColumnElement[bool]:
    """``partner`` (the model or an alias of it) is enabled and holds the key whose digest is
    ``bindparam("digest")``: the rule every lookup of a partner key applies."""
    return and_(partner.api_key_hash == bindparam("digest"), partner.disabled_at.is_(None))


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
    .where(holds_the_key(Partner))
)


def current_key_holders(session: Session, digests: set[str]) -> dict[str, KeyHolder]:
    """The key holders of these digests as the database has them now (enabled partners only),
    one prebuilt statement per digest (a batch's posts nearly always share one key), run on the
    driver in ``session``'s transaction."""
    ordered = list(digests)
    db = database_of(session)
    return key_holders_read(
        ordered, [db.session_rows(session, *r) for r in key_holder_reads(ordered)]
    )


def key_holder_reads(digests: list[str]) -> list[Read]:
    """The reads of ``current_key_holders``, for a caller that sends them together with its
    own (``Database.session_rows_together``); ``key_holders_read`` makes their rows holders."""
    return [(_KEY_HOLDER, {"digest": digest}) for digest in digests]


def key_holders_read(
    digests: list[str], results: list[list[tuple[Any, ...]]]
) -> dict[str, KeyHolder]:
    """The key holders of ``digests`` from the rows of their ``key_holder_reads``."""
    holders: dict[str, KeyHolder] = {}
    for digest, rows in zip(digests, results, strict=True):
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
    return Authenticator((KeyHeader.AUTHORIZATION,)).holder(session, Credentials(authorization))


@dataclass(frozen=True)
class Authenticator:
    """How one kind of caller is authenticated by a partner key: the headers its key may come in
    (the first sent counts), and the role its partner needs (None: any partner)."""

    where: tuple[KeyHeader, ...]
    role: PartnerRole | None = None

    def key_digest(self, credentials: Credentials) -> str:
        """The digest of the caller's key; 401 when it sent none."""
        return credentials.key_digest(*self.where)

    def holder(self, session: Session, credentials: Credentials) -> KeyHolder:
        """The caller's ``KeyHolder``: 401 without a key an enabled partner holds, then 403
        without the role."""
        holder = holder_of_digest(session, self.key_digest(credentials))
        if holder is None:
            raise Unauthorized(INVALID_KEY)
        return self.permitted(holder)

    def permitted(self, holder: P) -> P:
        """``holder`` if its partner has the role; 403 otherwise."""
        return holder if self.role is None else require_role(holder, self.role)


MERCHANTS = Authenticator((KeyHeader.AUTHORIZATION,), PartnerRole.MERCHANT)
"""Receipt posts and dry runs: the key in ``Authorization`` only."""
READERS = Authenticator((KeyHeader.AUTHORIZATION, KeyHeader.APP_KEY))
"""Receipt reads by a partner's own key: ``Authorization``, else the app key."""
CARD_ISSUERS = Authenticator((KeyHeader.APP_KEY, KeyHeader.AUTHORIZATION), PartnerRole.CARD_ISSUER)
"""Card issuers: the app key first, since ``Authorization`` may carry the card holder's token."""
APPS = Authenticator((KeyHeader.APP_KEY,))
"""A partner app acting for a user, beside the user's Bearer token: the app key only."""


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
