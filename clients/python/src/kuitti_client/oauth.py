"""The OAuth 2.0 authorization code flow with PKCE (S256), for a partner app (docs/oauth.md).

1. ``start_authorization(...)`` gives the consent URL to send the user to, and the ``state`` and
   ``code_verifier`` to keep (in the user's session) until the user comes back.
2. ``code_from_callback(request, callback_url)`` checks the returned ``state`` and gives the code.
3. ``exchange_code(...)`` (or ``exchange_code_async``) trades it, within 60 seconds and once,
   for the user's access token at ``/api/oauth/token``.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import json
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx

from kuitti_client import calls
from kuitti_client.models import AccessToken


class AuthorizationError(Exception):
    """The user came back without a code (``error`` is the OAuth error, e.g.
    ``access_denied``), or with a ``state`` that is not the one sent."""

    def __init__(self, error: str, description: str = "") -> None:
        super().__init__(f"{error}: {description}" if description else error)
        self.error = error
        self.description = description


@dataclass(frozen=True)
class AuthorizationRequest:
    """The consent ``url``, and what to keep until the callback: ``state`` and
    ``code_verifier`` (a secret: never send it anywhere but the token endpoint)."""

    url: str
    state: str
    code_verifier: str
    redirect_uri: str


def start_authorization(
    auth_url: str,
    client_id: str,
    redirect_uri: str,
    scopes: Iterable[str] = ("receipt:read",),
    *,
    message: str | None = None,
    partner_metadata: dict[str, Any] | None = None,
) -> AuthorizationRequest:
    """The consent URL at ``{auth_url}/auth``. ``state`` is URL-safe Base64 JSON holding a
    fresh random ``nonce`` (what makes the callback checkable), and the consent page's
    ``message`` and the connection's ``partner_metadata`` when given."""
    content: dict[str, Any] = {"nonce": secrets.token_urlsafe(16)}
    if message is not None:
        content["message"] = message
    if partner_metadata is not None:
        content["partner_metadata"] = partner_metadata
    state = base64.urlsafe_b64encode(json.dumps(content).encode()).rstrip(b"=").decode()
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    query = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect_uri,
        "scope": " ".join(scopes),
        "state": state,
        "code_challenge": challenge.rstrip(b"=").decode(),
        "code_challenge_method": "S256",
    }
    url = f"{auth_url.rstrip('/')}/auth?{urlencode(query)}"
    return AuthorizationRequest(url, state, verifier, redirect_uri)


def code_from_callback(request: AuthorizationRequest, callback_url: str) -> str:
    """The ``code`` of the URL the user was sent back to, once its ``state`` is checked."""
    query = parse_qs(urlsplit(callback_url).query)
    state = query.get("state", [""])[0]
    if not hmac.compare_digest(state.encode(), request.state.encode()):
        raise AuthorizationError("state_mismatch", "the state is not the one sent")
    if "error" in query:
        raise AuthorizationError(query["error"][0], query.get("error_description", [""])[0])
    if "code" not in query:
        raise AuthorizationError("invalid_request", "the callback has no code")
    return query["code"][0]


def _token_form(
    request: AuthorizationRequest, code: str, client_id: str, client_secret: str | None
) -> dict[str, str]:
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "client_id": client_id,
        "redirect_uri": request.redirect_uri,
        "code_verifier": request.code_verifier,
    }
    if client_secret is not None:  # a public client sends none
        form["client_secret"] = client_secret
    return form


def exchange_code(
    base_url: str,
    request: AuthorizationRequest,
    code: str,
    client_id: str,
    client_secret: str | None = None,
    *,
    timeout: float = 30.0,
) -> AccessToken:
    """The user's access token. Never retried: a code works once, and a second exchange
    revokes what the first one gave."""
    form = _token_form(request, code, client_id, client_secret)
    with httpx.Client(base_url=base_url, timeout=timeout) as http:
        response = http.post("/api/oauth/token", data=form)
    return AccessToken.model_validate_json(calls.checked(response).content)


async def exchange_code_async(
    base_url: str,
    request: AuthorizationRequest,
    code: str,
    client_id: str,
    client_secret: str | None = None,
    *,
    timeout: float = 30.0,
) -> AccessToken:
    """See ``exchange_code``."""
    form = _token_form(request, code, client_id, client_secret)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout) as http:
        response = await http.post("/api/oauth/token", data=form)
    return AccessToken.model_validate_json(calls.checked(response).content)
