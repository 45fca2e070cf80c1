"""User tokens (JWT access tokens) on API requests.

A partner application acts for a user with two headers: ``SERVICE_APIKEY`` (its own API key;
``Service-Apikey`` too, since proxies drop header names with underscores) and
``Authorization: Bearer <access token>``. The key's partner must be the partner the token was
issued to. Every check reads the database, so a revoked connection or token fails on the next
request.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends, Header
from sqlalchemy.orm import Session

from kuitti.clock import SystemClock
from kuitti.config import Settings
from kuitti.deps import Services, ServicesDep
from kuitti.errors import InsufficientScope, Unauthorized
from kuitti.models import Connection, Partner
from kuitti.oauth import tokens
from kuitti.oauth.scopes import Scope
from kuitti.oauth.tokens import InvalidToken
from kuitti.partners.service import partner_by_api_key
from kuitti.receipts.readers import Reader

__all__ = [
    "AppConnection",
    "InvalidToken",
    "OptionalBearerConnection",
    "bearer_token",
    "connection_for_user_token",
    "connection_reader",
    "optional_connection",
    "verify_access_token",
]


def verify_access_token(
    session: Session, settings: Settings, token: str, *, now: datetime | None = None
) -> Connection:
    """The active connection of a valid token; ``Unauthorized`` (``InvalidToken``) otherwise.

    Checks the ES256 signature with a key stored in the database, ``iss``, ``exp``, that the
    ``jti`` was issued and not revoked and that the connection is active. Pass the injected
    clock's ``now`` (tests move it); without it the system clock is used."""
    return tokens.verify(session, settings, token, now=now or SystemClock().now())


def bearer_token(authorization: str | None) -> str | None:
    """The token of an ``Authorization: Bearer <token>`` header, else None."""
    if not authorization:
        return None
    scheme, _, rest = authorization.strip().partition(" ")
    if scheme.lower() != "bearer" or not rest.strip():
        return None
    return rest.strip()


def _partner_of_key(session: Session, app_key: str | None) -> Partner:
    partner = partner_by_api_key(session, app_key) if app_key else None
    if partner is None:
        raise Unauthorized("The SERVICE_APIKEY is missing or not valid.")
    return partner


def _connection_of_partner(
    session: Session, settings: Settings, app_key: str | None, token: str, now: datetime
) -> Connection:
    partner = _partner_of_key(session, app_key)
    connection = verify_access_token(session, settings, token, now=now)
    if connection.partner_id != partner.id:
        raise Unauthorized("This user token was issued to another partner than the API key's.")
    return connection


def connection_reader(services: Services, app_key: str, bearer_token: str) -> Reader:
    """A reader acting for the user of the token's connection (needs ``receipt:read``)."""
    now = services.clock.now()
    with services.db.session(write=False) as session:
        connection = _connection_of_partner(session, services.settings, app_key, bearer_token, now)
    if Scope.RECEIPT_READ.value not in connection.scopes:
        raise InsufficientScope("The user's token does not have the receipt:read scope.")
    return Reader(partner_id=connection.partner_id, user_id=connection.user_id)


def connection_for_user_token(
    session: Session, settings: Settings, token: str, *, now: datetime | None = None
) -> Connection | None:
    """The connection of a ``USER`` token in a create-receipt request: None when the token is
    invalid, revoked or the connection lacks ``receipt:write``."""
    try:
        connection = verify_access_token(session, settings, token, now=now)
    except Unauthorized:
        return None
    return connection if Scope.RECEIPT_WRITE.value in connection.scopes else None


def optional_connection(
    session: Session,
    settings: Settings,
    authorization_header: str | None,
    partner: Partner,
    *,
    now: datetime | None = None,
) -> Connection | None:
    """The connection of an optional ``Authorization: Bearer`` header, which must belong to
    ``partner`` (the caller). No Bearer header: None. A Bearer token that is invalid, revoked
    or another partner's: ``Unauthorized``."""
    token = bearer_token(authorization_header)
    if token is None:
        return None
    connection = verify_access_token(session, settings, token, now=now)
    if connection.partner_id != partner.id:
        raise Unauthorized("This user token was issued to another partner.")
    return connection


def _app_connection(
    services: ServicesDep,
    authorization: Annotated[str | None, Header()] = None,
    service_apikey: Annotated[
        str | None, Header(alias="SERVICE_APIKEY", convert_underscores=False)
    ] = None,
    service_apikey_dashed: Annotated[str | None, Header(alias="Service-Apikey")] = None,
) -> Connection:
    token = bearer_token(authorization)
    if token is None:
        raise InvalidToken("Send the user's token as 'Authorization: Bearer <token>'.")
    with services.db.session(write=False) as session:
        return _connection_of_partner(
            session,
            services.settings,
            service_apikey or service_apikey_dashed,
            token,
            services.clock.now(),
        )


def _optional_bearer_connection(
    services: ServicesDep, authorization: Annotated[str | None, Header()] = None
) -> Connection | None:
    """A verified connection from an optional Bearer header (partner not yet checked: compare
    ``connection.partner_id`` with the caller, or use ``optional_connection``)."""
    token = bearer_token(authorization)
    if token is None:
        return None
    with services.db.session(write=False) as session:
        return verify_access_token(session, services.settings, token, now=services.clock.now())


AppConnection = Annotated[Connection, Depends(_app_connection)]
"""``SERVICE_APIKEY`` (or ``Service-Apikey``) + ``Authorization: Bearer`` of the same partner,
any scope."""

OptionalBearerConnection = Annotated[Connection | None, Depends(_optional_bearer_connection)]
"""A verified connection from an optional Bearer header; None without one. The route must
check that it belongs to the calling partner (``optional_connection`` does both)."""
