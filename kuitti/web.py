"""Server-rendered pages: templates, CSRF protection and the headers every page carries.

CSRF uses a signed double-submit token: ``<nonce>.<mac>`` in a ``SameSite=Lax`` cookie and the
same value in a hidden form field, where the mac is an HMAC, under the server secret, of the nonce
and the browser's session cookie (empty before login). A POST is accepted only when field and
cookie match and the mac is right for the session the request carries: a cookie and field that
a client chose itself, or a token issued to another session, are refused. It works before login
(login CSRF) and needs no server state; logging in issues a token bound to the new session.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import secrets
from typing import Annotated, Any

from fastapi import Form, Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from kuitti.deps import get_services
from kuitti.errors import Forbidden
from kuitti.paths import TEMPLATES_DIR

CSRF_COOKIE = "kuitti_csrf"
CSRF_FIELD = "csrf_token"
SESSION_COOKIE = "kuitti_session"

templates = Jinja2Templates(directory=TEMPLATES_DIR)

PAGE_HEADERS = {
    "X-Frame-Options": "DENY",
    "Content-Security-Policy": (
        "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; "
        "frame-ancestors 'none'; base-uri 'none'; object-src 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}


def _csrf_mac(request: Request, nonce: str, session_token: str) -> str:
    key = get_services(request).settings.resolved_secret_key.encode()
    message = f"csrf|{nonce}|{session_token}".encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def _csrf_valid(request: Request, token: str | None) -> bool:
    if not token:
        return False
    nonce, _, mac = token.partition(".")
    expected = _csrf_mac(request, nonce, request.cookies.get(SESSION_COOKIE, ""))
    return bool(nonce) and hmac.compare_digest(mac, expected)


def renew_csrf_token(request: Request, session_token: str) -> None:
    """Issue a token bound to ``session_token`` (a session that starts with this response);
    ``set_page_headers`` sets its cookie."""
    nonce = secrets.token_urlsafe(24)
    request.state.new_csrf_token = f"{nonce}.{_csrf_mac(request, nonce, session_token)}"


def csrf_token(request: Request) -> str:
    """The request's CSRF token: the cookie's while it is valid for the request's session, or a
    new one that ``render`` will set."""
    existing = request.cookies.get(CSRF_COOKIE)
    if _csrf_valid(request, existing):
        assert existing is not None
        return existing
    token: str | None = getattr(request.state, "new_csrf_token", None)
    if token is None:
        renew_csrf_token(request, request.cookies.get(SESSION_COOKIE, ""))
        token = request.state.new_csrf_token
    return token


CsrfForm = Annotated[str | None, Form()]
"""The ``csrf_token`` field every form posts; the route checks it with ``check_csrf``."""


def check_csrf(request: Request, submitted: str | None) -> None:
    cookie = request.cookies.get(CSRF_COOKIE)
    if (
        not cookie
        or not submitted
        or not hmac.compare_digest(cookie, submitted)
        or not _csrf_valid(request, cookie)
    ):
        raise Forbidden("The form has expired or did not come from this site; please try again.")


def secure_cookies(request: Request) -> bool:
    return get_services(request).settings.secure_cookies


def set_page_headers(request: Request, response: Response) -> Response:
    for name, value in PAGE_HEADERS.items():
        response.headers.setdefault(name, value)
    new_token = getattr(request.state, "new_csrf_token", None)
    if new_token:
        response.set_cookie(
            CSRF_COOKIE,
            new_token,
            httponly=True,
            samesite="lax",
            secure=secure_cookies(request),
            path="/",
        )
    return response


def render(
    request: Request,
    template: str,
    context: dict[str, Any] | None = None,
    *,
    status_code: int = 200,
    headers: dict[str, str] | None = None,
) -> HTMLResponse:
    """Render a page with the CSRF token available as ``csrf_token`` and the page headers set."""
    values = {"csrf_field": CSRF_FIELD, "csrf_token": csrf_token(request), **(context or {})}
    response = templates.TemplateResponse(
        request, template, values, status_code=status_code, headers=headers
    )
    set_page_headers(request, response)
    return response
