"""Creating and looking up partners. Secrets are returned once, at creation, and stored hashed
(the webhook key sealed, since signing needs it)."""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any
from urllib.parse import urlsplit

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import security
from kuitti.clock import iso_utc
from kuitti.ids import new_id
from kuitti.models import Namespace, Partner, PartnerRole
from kuitti.partners.idpolicy import parse_policy, policy_text

NAMESPACE_RE = re.compile(r"^[a-z0-9][a-z0-9-]{1,62}$")


class PartnerInputError(ValueError):
    """An operator gave a value the partner cannot be created or changed with."""


class SecretKind(StrEnum):
    """The secrets ``kuitti partner rotate`` replaces."""

    API_KEY = "api_key"
    CLIENT_SECRET = "client_secret"  # noqa: S105 (the name of a secret, not one)
    WEBHOOK_KEY = "webhook_key"


@dataclass(frozen=True)
class NewPartner:
    partner: Partner
    api_key: str
    client_secret: str | None
    webhook_key: str | None

    def as_json(self) -> dict[str, Any]:
        p = self.partner
        out: dict[str, Any] = {
            "partner_id": str(p.id),
            "name": p.name,
            "roles": list(p.roles),
            "api_key": self.api_key,
            "client_id": p.client_id,
            "namespaces": p.namespace_names,
            "webhook_url": p.webhook_url,
            "sandbox": p.sandbox,
        }
        if self.client_secret is not None:
            out["client_secret"] = self.client_secret
        if self.webhook_key is not None:
            out["webhook_key"] = self.webhook_key
        return out


def create_partner(
    session: Session,
    box: security.SecretBox,
    *,
    name: str,
    roles: list[PartnerRole],
    now: datetime,
    namespaces: list[str] = (),  # type: ignore[assignment]
    redirect_uris: list[str] = (),  # type: ignore[assignment]
    webhook_url: str | None = None,
    attachments: bool = False,
    iban: str | None = None,
    bic: str | None = None,
    public_client: bool = False,
    allow_insecure_webhooks: bool = False,
    sandbox: bool = False,
) -> NewPartner:
    """A new partner and its secrets. ``sandbox``: a test partner (docs/sandbox.md) whose keys
    start ``kt_test_``; it stays one for life."""
    if not name.strip():
        raise PartnerInputError("name must not be empty")
    if not roles:
        raise PartnerInputError("at least one --role is needed")
    for ns in namespaces:
        if not NAMESPACE_RE.match(ns):
            raise PartnerInputError(
                f"namespace {ns!r}: use 2–63 lower-case letters, digits and hyphens"
            )
        if session.get(Namespace, ns) is not None:
            raise PartnerInputError(f"namespace {ns!r} belongs to another partner")
    for uri in redirect_uris:
        _check_redirect_uri(uri)
    if webhook_url is not None:
        check_webhook_url(webhook_url, allow_insecure=allow_insecure_webhooks)
    if iban is not None:
        iban = _check_iban(iban)
    is_app = PartnerRole.APP in roles
    api_key = security.new_api_key(sandbox=sandbox)
    client_secret = security.new_client_secret() if is_app and not public_client else None
    webhook_key = security.new_webhook_key() if webhook_url else None
    partner = Partner(
        id=new_id(),
        name=name.strip(),
        roles=sorted({r.value for r in roles}),
        api_key_hash=security.hash_secret(api_key),
        client_id=security.new_client_id() if is_app else None,
        client_secret_hash=security.hash_secret(client_secret) if client_secret else None,
        public_client=public_client and is_app,
        redirect_uris=list(redirect_uris),
        webhook_url=webhook_url,
        webhook_key_sealed=box.seal(webhook_key) if webhook_key else None,
        attachments_enabled=attachments,
        iban=iban,
        bic=bic.upper() if bic else None,
        created_at=now,
        sandbox=sandbox,
    )
    session.add(partner)
    partner.namespaces = [
        Namespace(name=ns, partner_id=partner.id, position=i) for i, ns in enumerate(namespaces)
    ]
    session.flush()
    return NewPartner(partner, api_key, client_secret, webhook_key)


def get_partner(session: Session, partner_id: str) -> Partner:
    """The partner with this id (enabled or not); ``PartnerInputError`` when there is none."""
    try:
        partner = session.get(Partner, uuid.UUID(partner_id))
    except ValueError:
        partner = None
    if partner is None:
        raise PartnerInputError(f"no partner with id {partner_id!r}")
    return partner


def update_partner(
    session: Session,
    partner: Partner,
    *,
    name: str | None = None,
    webhook_url: str | None = None,
    iban: str | None = None,
    bic: str | None = None,
    add_redirect_uris: list[str] = (),  # type: ignore[assignment]
    remove_redirect_uris: list[str] = (),  # type: ignore[assignment]
    attachments: bool | None = None,
    id_policies: list[str] = (),  # type: ignore[assignment]
    retention_days: int | None = None,
    allow_insecure_webhooks: bool = False,
) -> Partner:
    """Change the settings given (None: unchanged). A new webhook URL keeps the webhook key:
    the receiver verifies signatures as before (``rotate`` issues a new key). ``id_policies``:
    ``NAMESPACE:POLICY`` each, the receipt identifier policy of one of the partner's
    namespaces (``kuitti.partners.idpolicy``; ``NAMESPACE:none`` removes it)."""
    if retention_days is not None:
        # 0 returns the partner to KUITTI_RECEIPT_RETENTION_DAYS (kuitti.retention).
        partner.retention_days = retention_days or None
    if name is not None:
        if not name.strip():
            raise PartnerInputError("name must not be empty")
        partner.name = name.strip()
    if webhook_url is not None:
        check_webhook_url(webhook_url, allow_insecure=allow_insecure_webhooks)
        if partner.webhook_key_sealed is None:
            raise PartnerInputError(
                "this partner has no webhook key: create it with --webhook-url, or rotate "
                "--secret webhook_key first"
            )
        partner.webhook_url = webhook_url
    if iban is not None:
        partner.iban = _check_iban(iban)
    if bic is not None:
        partner.bic = bic.upper()
    for uri in add_redirect_uris:
        _check_redirect_uri(uri)
    missing = [uri for uri in remove_redirect_uris if uri not in partner.redirect_uris]
    if missing:
        raise PartnerInputError(f"not a redirect URI of this partner: {', '.join(missing)}")
    uris = [uri for uri in partner.redirect_uris if uri not in remove_redirect_uris]
    partner.redirect_uris = uris + [uri for uri in add_redirect_uris if uri not in uris]
    if attachments is not None:
        partner.attachments_enabled = attachments
    for spec in id_policies:
        _set_id_policy(partner, spec)
    session.flush()
    return partner


def _set_id_policy(partner: Partner, spec: str) -> None:
    name, sep, text = spec.partition(":")
    namespace = next((ns for ns in partner.namespaces if ns.name == name), None)
    if not sep or namespace is None:
        raise PartnerInputError(
            f"--id-policy {spec!r}: write NAMESPACE:POLICY, NAMESPACE one of this partner's "
            f"namespaces ({', '.join(partner.namespace_names) or 'it has none'})"
        )
    try:
        policy = parse_policy(name, text)
    except ValueError as exc:
        raise PartnerInputError(f"--id-policy {spec!r}: {exc}") from None
    namespace.id_min_length = policy.min_length if policy else None
    namespace.id_alphabet = policy.alphabet if policy else None


def rotate_secret(
    session: Session, box: security.SecretBox, partner: Partner, kind: SecretKind
) -> str:
    """Replace one secret and return the new one (shown once). The old one stops working as
    soon as the transaction commits: every check reads the stored digest or sealed key."""
    match kind:
        case SecretKind.API_KEY:
            secret = security.new_api_key(sandbox=partner.sandbox)
            partner.api_key_hash = security.hash_secret(secret)
        case SecretKind.CLIENT_SECRET:
            if partner.client_id is None or partner.public_client:
                raise PartnerInputError(
                    "this partner has no client secret (not a confidential app)"
                )
            secret = security.new_client_secret()
            partner.client_secret_hash = security.hash_secret(secret)
        case SecretKind.WEBHOOK_KEY:
            secret = security.new_webhook_key()
            partner.webhook_key_sealed = box.seal(secret)
    session.flush()
    return secret


def set_disabled(session: Session, partner: Partner, *, disabled: bool, now: datetime) -> None:
    """Disable (refuse its keys, client credentials and tokens; hold its webhooks) or enable."""
    if disabled and partner.disabled_at is None:
        partner.disabled_at = now
    elif not disabled:
        partner.disabled_at = None
    session.flush()


def list_partners(session: Session) -> list[Partner]:
    return list(session.scalars(select(Partner).order_by(Partner.created_at, Partner.name)))


def partner_summary(partner: Partner) -> dict[str, Any]:
    return {
        "partner_id": str(partner.id),
        "name": partner.name,
        "roles": list(partner.roles),
        "client_id": partner.client_id,
        "namespaces": partner.namespace_names,
        "id_policies": {p.namespace: policy_text(p) for p in sorted(partner.id_policies)},
        "redirect_uris": list(partner.redirect_uris),
        "webhook_url": partner.webhook_url,
        "attachments": partner.attachments_enabled,
        "public_client": partner.public_client,
        "iban": partner.iban,
        "bic": partner.bic,
        "created_at": iso_utc(partner.created_at),
        "disabled": partner.disabled_at is not None,
        "sandbox": partner.sandbox,
        "retention_days": partner.retention_days,
    }


def _check_redirect_uri(uri: str) -> None:
    parts = urlsplit(uri)
    if parts.scheme not in {"https", "http"} or not parts.netloc or parts.fragment:
        raise PartnerInputError(
            f"redirect URI {uri!r}: must be an absolute http(s) URL without a fragment"
        )
    if parts.scheme == "http" and parts.hostname not in {"localhost", "127.0.0.1", "::1"}:
        raise PartnerInputError(f"redirect URI {uri!r}: http is allowed only for localhost")


def check_webhook_url(url: str, *, allow_insecure: bool) -> None:
    parts = urlsplit(url)
    if parts.scheme not in {"https", "http"} or not parts.hostname:
        raise PartnerInputError(f"webhook URL {url!r}: must be an absolute https URL")
    if parts.scheme == "http" and not allow_insecure:
        raise PartnerInputError(
            f"webhook URL {url!r}: must be https (KUITTI_WEBHOOK_ALLOW_INSECURE=true allows http "
            "for development)"
        )


def _check_iban(iban: str) -> str:
    compact = iban.replace(" ", "").upper()
    if not re.fullmatch(r"[A-Z]{2}\d{2}[A-Z0-9]{10,30}", compact):
        raise PartnerInputError(f"IBAN {iban!r} is not well formed")
    rearranged = compact[4:] + compact[:4]
    if int("".join(str(int(c, 36)) for c in rearranged)) % 97 != 1:
        raise PartnerInputError(f"IBAN {iban!r}: the check digits are wrong")
    return compact
