"""Plain functions that walk the browser side of the OAuth flow over HTTP (no browser needed)."""

from __future__ import annotations

import base64
import hashlib
import html
import re
import secrets
import uuid
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import orjson

from kuitti.delivery.service import deliver_to_user
from kuitti.models import PartnerRole, Receipt
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.factories import auth, make_partner, receipt_doc

REDIRECT_URI = "https://bank.example/oauth/callback"
CSRF_RE = re.compile(r'name="csrf_token" value="([^"]+)"')


def make_app(services: Any, name: str = "Pankki App", **options: Any) -> NewPartner:
    options.setdefault("redirect_uris", [REDIRECT_URI])
    return make_partner(services, PartnerRole.APP, name=name, **options)


def csrf_of(page: httpx.Response) -> str:
    match = CSRF_RE.search(page.text)
    assert match, page.text
    return match.group(1)


def state_of(message: str | None = None, **metadata: str) -> str:
    data: dict[str, Any] = {}
    if message is not None:
        data["message"] = message
    if metadata:
        data["partner_metadata"] = metadata
    return base64.b64encode(orjson.dumps(data)).decode()


def log_in(
    client: httpx.Client, email: str, password: str = "correct horse 1", next: str = "/account"
) -> httpx.Response:
    page = client.get("/login", params={"next": next})
    if page.status_code == 303:  # already logged in
        return page
    return client.post(
        "/login",
        data={
            "email": email,
            "password": password,
            "action": "login",
            "next": next,
            "csrf_token": csrf_of(page),
        },
    )


def auth_params(
    app: NewPartner,
    scope: str = "receipt:read",
    state: str | None = "xyz",
    redirect_uri: str = REDIRECT_URI,
    **extra: str,
) -> dict[str, str]:
    assert app.partner.client_id is not None
    params = {
        "response_type": "code",
        "client_id": app.partner.client_id,
        "redirect_uri": redirect_uri,
        "scope": scope,
        **extra,
    }
    if state is not None:
        params["state"] = state
    return params


def consent(
    client: httpx.Client, params: dict[str, str], decision: str = "approve"
) -> httpx.Response:
    """Open the consent page as the logged-in user and submit a decision; the redirect."""
    page = client.get("/auth", params=params)
    assert page.status_code == 200, page.text
    hidden = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)"', page.text))
    form = {k: _unescape(v) for k, v in hidden.items() if k != "next"}
    form["decision"] = decision
    return client.post("/auth", data=form)


def _unescape(value: str) -> str:

    return html.unescape(value)


def code_from(response: httpx.Response) -> tuple[str, dict[str, list[str]]]:
    assert response.status_code == 303, response.text
    location = response.headers["location"]
    query = parse_qs(urlsplit(location).query)
    return query["code"][0], query


def exchange(client: httpx.Client, app: NewPartner, code: str, **extra: str) -> httpx.Response:
    assert app.partner.client_id is not None
    body = {
        "grant_type": "authorization_code",
        "code": code,
        "client_id": app.partner.client_id,
        "redirect_uri": REDIRECT_URI,
    }
    if app.client_secret is not None:
        body["client_secret"] = app.client_secret
    body.update(extra)
    return client.post(
        "/api/oauth/token",
        content=urlencode(body),
        headers={"Content-Type": "application/x-www-form-urlencoded"},
    )


def pkce_pair() -> tuple[str, str]:
    verifier = secrets.token_urlsafe(48)
    challenge = base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest())
    return verifier, challenge.rstrip(b"=").decode()


def connect(
    client: httpx.Client,
    app: NewPartner,
    email: str,
    scope: str = "receipt:read",
    state: str | None = "xyz",
) -> str:
    """Log in, approve, exchange: the access token."""
    log_in(client, email)
    code, _ = code_from(consent(client, auth_params(app, scope=scope, state=state)))
    answer = exchange(client, app, code)
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token


def delivered_receipt(
    client: httpx.Client, services: Services, user_id: uuid.UUID, merchant_name: str = "Kauppa Oy"
) -> str:
    """A merchant posts a receipt and it is delivered to the user; its ``receipt_id``."""
    merchant = make_partner(services, PartnerRole.MERCHANT, name=merchant_name)
    answer = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    receipt_id: str = answer.json()["receipt_id"]
    with services.db.session() as session:
        receipt = session.get(Receipt, uuid.UUID(receipt_id))
        assert receipt is not None
        deliver_to_user(session, receipt, user_id, via="test", now=services.clock.now())
    return receipt_id
