"""User tokens (JWT access tokens) on API requests.

A partner application acts for a user with two headers: ``SERVICE_APIKEY`` (its own API key;
``Service-Apikey`` too, since proxies drop header names with underscores) and
``Authorization: Bearer <access token>``. The key's partner must be the partner the token was
issued to. Every check reads the database (through the request's session, ``deps.py``), so a
revoked connection or token fails on the next request. Verifying a token itself is
``oauth/tokens.py``'s.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated

from fastapi import Depends
from sqlalchemy.orm import Session

from kuitti.config import Settings
from kuitti.deps import Now, ReadSession, ServicesDep, release_connection
from kuitti.errors import InsufficientScope, Unauthorized
from kuitti.models import Connection, Partner
from kuitti.oauth.scopes import Scope
from kuitti.oauth.tokens import InvalidToken, verify_access_token
from kuitti.partners.auth import RequestCredentials
from kuitti.partners.keys import APPS, Credentials, KeyHolder, bearer_token, holder_of_digest

INVALID_APP_KEY = "The SERVICE_APIKEY is missing or not valid."
BEARER_NEEDED = "Send the user's token as 'Authorization: Bearer <token>'."


def app_partner(session: Session, app_key: str | None) -> KeyHolder | None:
    """The enabled partner of an app key (``SERVICE_APIKEY``), if one was sent."""
    credentials = Credentials(None, app_key)
    if credentials.key(*APPS.where) is None:
        return None
    return holder_of_digest(session, APPS.key_digest(credentials))


def app_connection(
    session: Session, settings: Settings, app_key: str | None, token: str, *, now: datetime
) -> tuple[KeyHolder, Connection]:
    """The partner of ``app_key`` and the connection of ``token``, which must have been issued
    to that partner."""
    partner = app_partner(session, app_key)
    if partner is None:
        raise Unauthorized(INVALID_APP_KEY)
    connection = verify_access_token(session, settings, token, now=now)
    if connection.partner_id != partner.id:
        raise Unauthorized("This user token was issued to another partner than the API key's.")
    return partner, connection


def reading_connection(
    session: Session, settings: Settings, app_key: str | None, token: str, *, now: datetime
) -> tuple[KeyHolder, Connection]:
    """``app_connection`` that may read the user's receipts (needs ``receipt:read``)."""
    partner, connection = app_connection(session, settings, app_key, token, now=now)
    if Scope.RECEIPT_READ.value not in connection.scopes:
        raise InsufficientScope("The user's token does not have the receipt:read scope.")
    return partner, connection


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
    services: ServicesDep, session: ReadSession, now: Now, credentials: RequestCredentials
) -> Connection:
    token = credentials.bearer
    if token is None:
        raise InvalidToken(BEARER_NEEDED)
    _, connection = app_connection(session, services.settings, credentials.app_key, token, now=now)
    release_connection(session, connection)
    return connection


AppConnection = Annotated[Connection, Depends(_app_connection)]
"""``SERVICE_APIKEY`` (or ``Service-Apikey``) + ``Authorization: Bearer`` of the same partner,
any scope. It arrives detached (``release_connection``)."""
