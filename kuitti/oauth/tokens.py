"""Access tokens: ES256 JWTs naming their connection, checked against the database on every use.

Claims: ``iss`` (the issuer, ``KUITTI_PUBLIC_URL``), ``aud`` (the partner's client id),
``service_id`` (the connection), ``scope`` (as granted when issued), ``iat``, ``exp`` and
``jti``. A token is valid only while its ``jti`` row and its connection are not revoked, so
revocation takes effect on the next request whatever the ``exp``.
"""

from __future__ import annotations

import secrets
import uuid
from datetime import datetime, timedelta
from typing import Any

from joserfc import jwt
from joserfc.errors import JoseError
from joserfc.jwk import ECKey, GuestProtocol
from joserfc.jwt import JWTClaimsRegistry
from sqlalchemy import update
from sqlalchemy.orm import Session

from kuitti.clock import SystemClock
from kuitti.config import Settings
from kuitti.errors import Unauthorized
from kuitti.models import Connection, IssuedToken, Partner
from kuitti.oauth import keys
from kuitti.oauth.scopes import Scope
from kuitti.security import SecretBox

# Partners hold one token per connection and have no refresh token (the interface has none), so
# a token lives long; it dies at once when the connection or the token is revoked.
ACCESS_TOKEN_TTL_SECONDS = 365 * 24 * 3600


class InvalidToken(Unauthorized):
    """A Bearer token that is not (or no longer) valid (RFC 6750 §3.1 ``invalid_token``)."""

    code = "invalid_token"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": 'Bearer error="invalid_token"'}


def issue_access_token(
    session: Session,
    settings: Settings,
    connection: Connection,
    partner: Partner,
    *,
    code_hash: str | None,
    now: datetime,
) -> str:
    kid, key = keys.current_key(session, SecretBox(settings.resolved_secret_key), now=now)
    jti = secrets.token_urlsafe(24)
    issued_at = int(now.timestamp())
    expires = now + timedelta(seconds=ACCESS_TOKEN_TTL_SECONDS)
    claims: dict[str, Any] = {
        "iss": settings.issuer,
        "aud": partner.client_id,
        "sub": str(connection.id),
        "service_id": str(connection.id),
        "scope": connection.scope,
        "iat": issued_at,
        "exp": int(expires.timestamp()),
        "jti": jti,
    }
    session.add(
        IssuedToken(
            jti=jti,
            connection_id=connection.id,
            code_hash=code_hash,
            scope=connection.scope,
            issued_at=now,
            expires_at=expires,
        )
    )
    session.flush()
    return jwt.encode({"alg": keys.ALGORITHM, "kid": kid, "typ": "at+jwt"}, claims, key)


def decode_claims(
    session: Session, settings: Settings, token: str, *, now: datetime
) -> dict[str, Any]:
    """The claims of a token signed by one of our keys, with valid ``iss``/``iat``/``exp``;
    raises ``InvalidToken`` otherwise. The database checks are ``verify``'s."""

    def resolve(guest: GuestProtocol) -> ECKey:
        header = guest.headers()
        kid = header.get("kid")
        key = keys.public_key(session, kid) if isinstance(kid, str) else None
        if key is None:
            raise InvalidToken("The token was not signed by a key of this service.")
        return key

    try:
        decoded = jwt.decode(token.strip(), resolve, algorithms=[keys.ALGORITHM])
        registry = JWTClaimsRegistry(
            now=int(now.timestamp()),
            leeway=60,
            iss={"essential": True, "value": settings.issuer},
            aud={"essential": True},
            service_id={"essential": True},
            scope={"essential": True},
            jti={"essential": True},
            iat={"essential": True},
        )
        registry.validate(decoded.claims)
    except InvalidToken:
        raise
    except (JoseError, ValueError, TypeError, KeyError) as exc:
        raise InvalidToken(f"The token is not valid ({type(exc).__name__}).") from None
    return dict(decoded.claims)


def verify_access_token(
    session: Session, settings: Settings, token: str, *, now: datetime | None = None
) -> Connection:
    """The active connection of a valid token; ``InvalidToken`` (an ``Unauthorized``) otherwise.

    Checks the ES256 signature with a key stored in the database, ``iss``, ``exp``, that the
    ``jti`` was issued and not revoked and that the connection is active. Pass the injected
    clock's ``now`` (tests move it); without it the system clock is used."""
    claims = decode_claims(session, settings, token, now=now or SystemClock().now())
    issued = session.get(IssuedToken, str(claims["jti"]))
    if issued is None or issued.revoked_at is not None:
        raise InvalidToken("The token has been revoked.")
    try:
        service_id = uuid.UUID(str(claims["service_id"]))
    except ValueError:
        raise InvalidToken("The token is not valid.") from None
    connection = session.get(Connection, issued.connection_id)
    if connection is None or connection.id != service_id or not connection.active:
        raise InvalidToken("The connection of this token has been removed.")
    partner = session.get(Partner, connection.partner_id)
    if partner is None or partner.disabled_at is not None or claims["aud"] != partner.client_id:
        raise InvalidToken("The token is not valid.")
    return connection


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


def revoke_tokens_from_code(session: Session, code_hash: str, *, now: datetime) -> int:
    result = session.execute(
        update(IssuedToken)
        .where(IssuedToken.code_hash == code_hash, IssuedToken.revoked_at.is_(None))
        .values(revoked_at=now)
    )
    return int(getattr(result, "rowcount", 0) or 0)
