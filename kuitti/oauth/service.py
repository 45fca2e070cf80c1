"""The authorization server (RFC 6749 authorization code grant, RFC 7636 PKCE, RFC 9700 BCP).

Hook names follow the RFC: ``validate_authorization_request`` (§4.1.1), ``approve`` (issues the
code of §4.1.2), ``exchange_code`` (§4.1.3 and §5). Errors are ``OAuthError`` subclasses, one
per RFC error code; the routes render them.

Why one long module: the whole grant, each RFC step beside its checks in the order the RFC
prescribes, reads top to bottom in one place.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import re
import secrets
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any
from urllib.parse import unquote, urlencode, urlsplit, urlunsplit

import orjson
from sqlalchemy import select, update
from sqlalchemy.orm import Session

from kuitti import locks, security
from kuitti.clock import as_utc
from kuitti.config import Settings
from kuitti.ids import new_id
from kuitti.inputs import has_nul
from kuitti.models import AuthorizationCode, Connection, Partner, PartnerRole, User
from kuitti.oauth import tokens
from kuitti.oauth.scopes import Scope, parse_scope, scope_string

CODE_TTL_SECONDS = 60
MAX_STATE_CHARS = 4000
MAX_MESSAGE_CHARS = 500
MAX_METADATA_BYTES = 2000
PKCE_RE = re.compile(r"^[A-Za-z0-9._~-]{43,128}$")
AUTH_PARAMETERS = (
    "response_type",
    "client_id",
    "redirect_uri",
    "scope",
    "state",
    "code_challenge",
    "code_challenge_method",
)


# --- errors ---------------------------------------------------------------------------------


class OAuthError(Exception):
    """An RFC 6749 error (§4.1.2.1 on the redirect, §5.2 from the token endpoint)."""

    error = "invalid_request"
    status_code = 400

    def __init__(self, description: str) -> None:
        super().__init__(description)
        self.description = description

    def as_json(self) -> dict[str, str]:
        return {"error": self.error, "error_description": self.description}


class InvalidRequestError(OAuthError):
    error = "invalid_request"


class InvalidClientError(OAuthError):
    error = "invalid_client"
    status_code = 401


class InvalidGrantError(OAuthError):
    error = "invalid_grant"


class UnauthorizedClientError(OAuthError):
    error = "unauthorized_client"


class UnsupportedGrantTypeError(OAuthError):
    error = "unsupported_grant_type"


class UnsupportedResponseTypeError(OAuthError):
    error = "unsupported_response_type"


class InvalidScopeError(OAuthError):
    error = "invalid_scope"


class AccessDeniedError(OAuthError):
    error = "access_denied"


class ClientRejected(Exception):
    """An unknown client or an unregistered redirect URI: shown to the user, never redirected
    to (RFC 6749 §4.1.2.1)."""


class RedirectableError(Exception):
    """An error sent back to the (validated) redirect URI with the state."""

    def __init__(self, error: OAuthError, redirect_uri: str, state: str | None) -> None:
        super().__init__(error.description)
        self.error = error
        self.redirect_uri = redirect_uri
        self.state = state

    def location(self) -> str:
        params = {"error": self.error.error, "error_description": self.error.description}
        return with_query(self.redirect_uri, params, self.state)


# --- the authorization request -------------------------------------------------------------


@dataclass(frozen=True)
class StateContent:
    message: str | None = None
    partner_metadata: dict[str, Any] | None = None


@dataclass(frozen=True)
class AuthorizationRequest:
    partner: Partner
    redirect_uri: str
    scopes: list[Scope]
    state: str | None
    code_challenge: str | None
    content: StateContent = field(default_factory=StateContent)

    @property
    def scope(self) -> str:
        return scope_string(self.scopes)

    def parameters(self) -> dict[str, str]:
        """The request again, for the consent form's hidden fields."""
        assert self.partner.client_id is not None
        params = {
            "response_type": "code",
            "client_id": self.partner.client_id,
            "redirect_uri": self.redirect_uri,
            "scope": self.scope,
        }
        if self.state is not None:
            params["state"] = self.state
        if self.code_challenge is not None:
            params["code_challenge"] = self.code_challenge
            params["code_challenge_method"] = "S256"
        return params


def decode_state(state: str | None) -> StateContent:
    """``message`` and ``partner_metadata`` from a Base64 JSON state; empty for any other
    state (which is still echoed)."""
    if not state:
        return StateContent()
    padded = state.strip().replace("-", "+").replace("_", "/")
    padded += "=" * (-len(padded) % 4)
    try:
        data = orjson.loads(base64.b64decode(padded, validate=True))
    except (binascii.Error, ValueError, orjson.JSONDecodeError):
        return StateContent()
    if not isinstance(data, dict):
        return StateContent()
    message = data.get("message")
    metadata = data.get("partner_metadata")
    if not isinstance(message, str) or not message.strip():
        message = None
    elif len(message) > MAX_MESSAGE_CHARS:
        message = message[:MAX_MESSAGE_CHARS] + "…"
    if not isinstance(metadata, dict) or len(orjson.dumps(metadata)) > MAX_METADATA_BYTES:
        metadata = None
    return StateContent(message=message, partner_metadata=metadata or None)


def app_partner_by_client_id(session: Session, client_id: str | None) -> Partner | None:
    if not client_id:
        return None
    partner = session.scalar(
        select(Partner).where(Partner.client_id == client_id, Partner.disabled_at.is_(None))
    )
    if partner is None or not partner.has_role(PartnerRole.APP):
        return None
    return partner


def validate_authorization_request(
    session: Session, params: Mapping[str, list[str]]
) -> AuthorizationRequest:
    """Check an authorization request in the order RFC 6749 §4.1.2.1 demands: the client and
    redirect URI first (``ClientRejected``, never redirected), then the rest
    (``RedirectableError``)."""

    def one(name: str) -> str | None:
        values = params.get(name) or []
        return values[0] if len(values) == 1 else None

    client_id = one("client_id")
    partner = app_partner_by_client_id(session, client_id)
    if partner is None:
        raise ClientRejected("The application that sent you here is not known to kuitti.")
    redirect_uri = one("redirect_uri")
    if redirect_uri is None or redirect_uri not in partner.redirect_uris:
        raise ClientRejected(
            "The application that sent you here gave a return address that is not registered "
            "with kuitti, so you are not sent back there."
        )
    state = one("state")
    states = params.get("state") or []

    def fail(error: OAuthError) -> RedirectableError:
        return RedirectableError(error, redirect_uri, states[0] if states else None)

    for name in AUTH_PARAMETERS:
        if len(params.get(name) or []) > 1:
            raise fail(InvalidRequestError(f"The parameter {name} is given more than once."))
    if state is not None and len(state) > MAX_STATE_CHARS:
        raise fail(InvalidRequestError(f"state is longer than {MAX_STATE_CHARS} characters."))
    response_type = one("response_type")
    if response_type is None:
        raise fail(InvalidRequestError("response_type is required."))
    if response_type != "code":
        raise fail(UnsupportedResponseTypeError("Only response_type=code is supported."))
    raw_scope = one("scope")
    if raw_scope is None:
        raise fail(InvalidScopeError("scope is required: receipt:read, receipt:write or both."))
    scopes = parse_scope(raw_scope)
    if scopes is None:
        raise fail(InvalidScopeError("scope must be receipt:read, receipt:write or both."))
    challenge = one("code_challenge")
    method = one("code_challenge_method")
    if challenge is None:
        if method is not None:
            raise fail(InvalidRequestError("code_challenge_method without code_challenge."))
        if partner.public_client:
            raise fail(InvalidRequestError("This client must use PKCE (code_challenge, S256)."))
    else:
        if method != "S256":
            raise fail(InvalidRequestError("code_challenge_method must be S256."))
        if not PKCE_RE.match(challenge):
            raise fail(InvalidRequestError("code_challenge is not a valid S256 challenge."))
    return AuthorizationRequest(
        partner=partner,
        redirect_uri=redirect_uri,
        scopes=scopes,
        state=state,
        code_challenge=challenge,
        content=decode_state(state),
    )


def with_query(uri: str, params: Mapping[str, str], state: str | None) -> str:
    """``uri`` with ``params`` (and ``state`` last, unchanged) added to its query."""
    parts = urlsplit(uri)
    values = dict(params)
    if state is not None:
        values["state"] = state
    query = urlencode(values)
    joined = f"{parts.query}&{query}" if parts.query else query
    return urlunsplit((parts.scheme, parts.netloc, parts.path, joined, parts.fragment))


# --- connections and codes -------------------------------------------------------------------


def active_connection(
    session: Session, user_id: uuid.UUID, partner_id: uuid.UUID
) -> Connection | None:
    return session.scalar(
        select(Connection).where(
            Connection.user_id == user_id,
            Connection.partner_id == partner_id,
            Connection.revoked_at.is_(None),
        )
    )


def connect(
    session: Session,
    user: User,
    partner: Partner,
    scopes: list[Scope],
    metadata: dict[str, Any] | None,
    *,
    now: datetime,
) -> Connection:
    """The user's one active connection to the partner, created or given the new scopes (its
    ``service_id`` stays). New ``partner_metadata`` replaces the old; none keeps it."""
    locks.acquire(session, "connection", str(user.id), str(partner.id))
    connection = active_connection(session, user.id, partner.id)
    if connection is None:
        connection = Connection(
            id=new_id(),
            user_id=user.id,
            partner_id=partner.id,
            scope=scope_string(scopes),
            partner_metadata=metadata,
            created_at=now,
            updated_at=now,
        )
        session.add(connection)
    else:
        connection.scope = scope_string(scopes)
        if metadata is not None:
            connection.partner_metadata = metadata
        connection.updated_at = now
    session.flush()
    return connection


def approve(session: Session, request: AuthorizationRequest, user: User, *, now: datetime) -> str:
    """The user approved: connect and return the redirect with a fresh code (§4.1.2)."""
    connection = connect(
        session, user, request.partner, request.scopes, request.content.partner_metadata, now=now
    )
    code = secrets.token_urlsafe(32)
    session.add(
        AuthorizationCode(
            code_hash=security.hash_secret(code),
            connection_id=connection.id,
            partner_id=request.partner.id,
            redirect_uri=request.redirect_uri,
            scope=connection.scope,
            code_challenge=request.code_challenge,
            created_at=now,
            expires_at=now + timedelta(seconds=CODE_TTL_SECONDS),
        )
    )
    session.flush()
    return with_query(request.redirect_uri, {"code": code}, request.state)


def deny(request: AuthorizationRequest) -> str:
    error = AccessDeniedError("The user did not allow the connection.")
    return with_query(request.redirect_uri, {"error": error.error}, request.state)


# --- the token endpoint ----------------------------------------------------------------------


def s256(verifier: str) -> str:
    digest = hashlib.sha256(verifier.encode("ascii")).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def basic_credentials(authorization: str | None) -> tuple[str, str] | None:
    """``client_id`` and ``client_secret`` of an HTTP Basic header (form-urlencoded parts,
    RFC 6749 §2.3.1)."""
    if not authorization:
        return None
    scheme, _, value = authorization.strip().partition(" ")
    if scheme.lower() != "basic":
        return None
    try:
        decoded = base64.b64decode(value.strip(), validate=True).decode()
    except (binascii.Error, UnicodeDecodeError):
        raise InvalidClientError("The Basic credentials are not readable.") from None
    client_id, sep, secret = decoded.partition(":")
    client_id, secret = unquote(client_id.replace("+", " ")), unquote(secret.replace("+", " "))
    if not sep or has_nul(client_id) or has_nul(secret):
        raise InvalidClientError("The Basic credentials are not readable.")
    return client_id, secret


def authenticate_client(
    session: Session, fields: Mapping[str, str], basic: tuple[str, str] | None
) -> Partner:
    """Client authentication by HTTP Basic or ``client_secret`` in the body (never both);
    public clients identify themselves by ``client_id`` alone."""
    if basic is not None:
        if "client_secret" in fields:
            raise InvalidRequestError("Use one client authentication method, not two.")
        if "client_id" in fields and fields["client_id"] != basic[0]:
            raise InvalidClientError("client_id differs from the authenticated client.")
        client_id: str = basic[0]
        secret: str | None = basic[1]
    else:
        client_id, secret = fields.get("client_id", ""), fields.get("client_secret")
    partner = app_partner_by_client_id(session, client_id)
    if partner is None:
        raise InvalidClientError("Client authentication failed.")
    if partner.public_client:
        if secret:
            raise InvalidClientError("Client authentication failed.")
        return partner
    if (
        not secret
        or partner.client_secret_hash is None
        or not security.secret_matches(secret, partner.client_secret_hash)
    ):
        raise InvalidClientError("Client authentication failed.")
    return partner


@dataclass(frozen=True)
class TokenResponse:
    access_token: str
    scope: str
    service_id: str

    def as_json(self) -> dict[str, str | int]:
        return {
            "token_type": "Bearer",
            "access_token": self.access_token,
            "scope": self.scope,
            "service_id": self.service_id,
            "expires_in": tokens.ACCESS_TOKEN_TTL_SECONDS,
        }


@dataclass(frozen=True, slots=True)
class TokenRequest:
    """A token request whose form needs no database: the grant type is ours and the Basic
    header, if any, is readable."""

    fields: Mapping[str, str]
    basic: tuple[str, str] | None


def token_request(fields: Mapping[str, str], authorization: str | None) -> TokenRequest:
    """Check what a token request says without reading the database, so that a malformed one
    is refused before the route opens its write unit."""
    basic = basic_credentials(authorization)
    grant_type = fields.get("grant_type")
    if not grant_type:
        raise InvalidRequestError("grant_type is required.")
    if grant_type != "authorization_code":
        raise UnsupportedGrantTypeError("Only grant_type=authorization_code is supported.")
    return TokenRequest(fields, basic)


def exchange_code(
    session: Session, settings: Settings, request: TokenRequest, *, now: datetime
) -> TokenResponse:
    """Exchange an authorization code for an access token (§4.1.3). A replayed code fails and
    revokes the tokens issued from it; the caller must commit even when this raises
    ``InvalidGrantError`` (the revocation is part of the answer)."""
    fields = request.fields
    partner = authenticate_client(session, fields, request.basic)
    code = fields.get("code")
    if not code:
        raise InvalidRequestError("code is required.")
    code_hash = security.hash_secret(code)
    row = session.get(AuthorizationCode, code_hash)
    if row is None or row.partner_id != partner.id:
        raise InvalidGrantError("The code is not valid.")
    if row.used_at is not None:
        tokens.revoke_tokens_from_code(session, code_hash, now=now)
        raise InvalidGrantError("The code has already been used; its tokens are revoked.")
    if now >= as_utc(row.expires_at):
        raise InvalidGrantError("The code has expired.")
    if fields.get("redirect_uri") != row.redirect_uri:
        raise InvalidGrantError("redirect_uri differs from the one of the authorization.")
    verifier = fields.get("code_verifier")
    if row.code_challenge is not None:
        if not verifier or not PKCE_RE.match(verifier) or s256(verifier) != row.code_challenge:
            raise InvalidGrantError("The code_verifier does not match the code_challenge.")
    elif verifier is not None:
        raise InvalidGrantError("code_verifier given, but the authorization had no challenge.")
    claimed = session.execute(
        update(AuthorizationCode)
        .where(AuthorizationCode.code_hash == code_hash, AuthorizationCode.used_at.is_(None))
        .values(used_at=now)
    )
    if int(getattr(claimed, "rowcount", 0) or 0) != 1:
        # Another request redeemed it a moment ago: this one is the replay.
        tokens.revoke_tokens_from_code(session, code_hash, now=now)
        raise InvalidGrantError("The code has already been used; its tokens are revoked.")
    connection = session.get(Connection, row.connection_id)
    if connection is None or not connection.active:
        raise InvalidGrantError("The connection of this code has been removed.")
    access_token = tokens.issue_access_token(
        session, settings, connection, partner, code_hash=code_hash, now=now
    )
    return TokenResponse(access_token, connection.scope, str(connection.id))
