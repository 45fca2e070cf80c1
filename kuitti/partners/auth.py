"""Who is calling: partner API keys in ``Authorization`` (``Token <key>`` or the bare key)."""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Header, Request
from sqlalchemy import bindparam, select
from sqlalchemy.orm import Session

from kuitti.deps import ReadSession, ServicesDep, release_connection
from kuitti.errors import Unauthorized
from kuitti.models import Partner, PartnerRole
from kuitti.partners.keys import INVALID_KEY, key_digest, require_role
from kuitti.partners.service import partner_by_key_digest
from kuitti.services import Services


def authenticate_partner(
    services: Services, session: Session, authorization: str | None
) -> Partner:
    """The enabled partner of the key, read through ``session`` (the request's session).

    Looked up on every request, never cached in the process: a key rotated or a partner
    disabled by the operator (from another process) is refused by the very next request.
    (Receipt posts remember key holders, ``kuitti.partners.keys``, and check them again in the
    transaction that stores the receipt.)"""
    partner = partner_by_key_digest(session, key_digest(authorization))
    if partner is None:
        raise Unauthorized(INVALID_KEY)
    # The partner leaves with its namespaces loaded; no connection is kept (deps.py says why).
    release_connection(session, partner)
    return partner


_ENABLED_PARTNER_ID = select(Partner.id, Partner.sandbox).where(
    Partner.api_key_hash == bindparam("digest"), Partner.disabled_at.is_(None)
)


def authenticate_partner_id(session: Session, authorization: str | None) -> tuple[uuid.UUID, bool]:
    """``authenticate_partner`` for a caller that needs only the partner's id and whether it is a
    sandbox partner (a reader): one indexed lookup of a prebuilt statement, no partner object or
    namespaces loaded; still on every request."""
    row = session.execute(_ENABLED_PARTNER_ID, {"digest": key_digest(authorization)}).first()
    if row is None:
        raise Unauthorized(INVALID_KEY)
    return row.id, row.sandbox


def _merchant(
    services: ServicesDep,
    session: ReadSession,
    authorization: Annotated[str | None, Header()] = None,
) -> Partner:
    partner = authenticate_partner(services, session, authorization)
    return require_role(partner, PartnerRole.MERCHANT)


def _any_partner(
    services: ServicesDep,
    session: ReadSession,
    authorization: Annotated[str | None, Header()] = None,
) -> Partner:
    return authenticate_partner(services, session, authorization)


MerchantPartner = Annotated[Partner, Depends(_merchant)]
KeyPartner = Annotated[Partner, Depends(_any_partner)]


def service_api_key(headers: Mapping[str, str]) -> str | None:
    """The partner application key from ``SERVICE_APIKEY`` or ``Service-Apikey``, if sent:
    proxies such as nginx drop header names with underscores by default, so both work."""
    return headers.get("service_apikey") or headers.get("service-apikey")


async def _service_api_key(request: Request) -> str | None:
    return service_api_key(request.headers)


ServiceApiKey = Annotated[str | None, Depends(_service_api_key)]
"""The partner application key from ``SERVICE_APIKEY`` (or ``Service-Apikey``), if sent."""
