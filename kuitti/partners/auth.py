"""Who is calling: partner API keys in ``Authorization`` (``Token <key>`` or the bare key)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header
from sqlalchemy.orm import Session

from kuitti.deps import ReadSession, ServicesDep
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
    # Hand the session's connection back before the route runs (the partner leaves with its
    # namespaces loaded): a route that writes opens a unit of its own, and a request must never
    # hold one connection while it waits for a second. With more requests in flight than the
    # pool has connections, every one of them did, until the pool timeout answered 500.
    session.expunge(partner)
    session.rollback()
    return partner


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


async def _service_api_key(
    service_apikey: Annotated[
        str | None, Header(alias="SERVICE_APIKEY", convert_underscores=False)
    ] = None,
    service_apikey_dashed: Annotated[str | None, Header(alias="Service-Apikey")] = None,
) -> str | None:
    # Proxies such as nginx drop header names with underscores by default; both spellings work.
    return service_apikey or service_apikey_dashed


ServiceApiKey = Annotated[str | None, Depends(_service_api_key)]
"""The partner application key from ``SERVICE_APIKEY`` (or ``Service-Apikey``), if sent."""
