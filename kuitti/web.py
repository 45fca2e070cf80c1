"""Server-rendered pages: templates, CSRF protection and the headers every page carries.

CSRF uses a signed double-submit token: ``<nonce>.<mac>`` in a ``SameSite=Lax`` cookie and the
same value in a hidden form field, where the mac is an HMAC, under the server secret, of the nonce
and what the browser's requests are bound to: its session cookie, or before login its pre-session
cookie (``kuitti_presession``, a random value the server issues with the first form). A POST is
accepted only when field and cookie match and the mac is right for the session or pre-session the
request carries: a cookie and field that a client chose itself, or a token issued to another
browser, are refused. It needs no server state; logging in issues a token bound to the new session.
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
PRESESSION_COOKIE = "kuitti_presession"

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


def _binding(request: Request) -> str:
    """What the request's tokens are bound to: its session, else its pre-session, else none."""
    issued: str = getattr(request.state, "new_presession", "")
    return request.cookies.get(SESSION_COOKIE) or request.cookies.get(PRESESSION_COOKIE) or issued


def _csrf_valid(request: Request, token: str | None) -> bool:
    binding = _binding(request)
    if not token or not binding:
        return False
    nonce, _, mac = token.partition(".")
    return bool(nonce) and hmac.compare_digest(mac, _csrf_mac(request, nonce, binding))


def renew_csrf_token(request: Request, session_token: str) -> None:
    """Issue a token bound to ``session_token`` (a session that starts with this response);
    ``set_page_headers`` sets its cookie."""
    nonce = secrets.token_urlsafe(24)
    request.state.new_csrf_token = f"{nonce}.{_csrf_mac(request, nonce, session_token)}"


def csrf_token(request: Request) -> str:
    """The request's CSRF token: the cookie's while it is valid for the request's session or
    pre-session, or a new one that ``render`` will set (with a new pre-session if it has none)."""
    existing = request.cookies.get(CSRF_COOKIE)
    if _csrf_valid(request, existing):
        assert existing is not None
        return existing
    token: str | None = getattr(request.state, "new_csrf_token", None)
    if token is None:
        if not _binding(request):
            request.state.new_presession = secrets.token_urlsafe(32)
        renew_csrf_token(request, _binding(request))
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
    for cookie, attribute in (
        (PRESESSION_COOKIE, "new_presession"),
        (CSRF_COOKIE, "new_csrf_token"),
    ):
        new_value: str | None = getattr(request.state, attribute, None)
        if new_value:
            response.set_cookie(
                cookie,
                new_value,
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
