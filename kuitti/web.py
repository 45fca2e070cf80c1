"""Server-rendered pages: templates, CSRF protection and the headers every page carries.

CSRF uses the double-submit pattern: a random token in a ``SameSite=Lax`` cookie and the same
value in a hidden form field; a POST whose field does not match the cookie is refused. It works
before login (login CSRF) and needs no server state.
"""

from __future__ import annotations

import hmac
import secrets
from typing import Any

from fastapi import Request
from fastapi.responses import HTMLResponse
from fastapi.templating import Jinja2Templates
from starlette.responses import Response

from kuitti.deps import get_services
from kuitti.errors import Forbidden
from kuitti.paths import TEMPLATES_DIR

CSRF_COOKIE = "kuitti_csrf"
CSRF_FIELD = "csrf_token"

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


def csrf_token(request: Request) -> str:
    """The request's CSRF token: the cookie's, or a new one that ``render`` will set."""
    existing = request.cookies.get(CSRF_COOKIE)
    if existing and len(existing) >= 32:
        return existing
    token: str | None = getattr(request.state, "new_csrf_token", None)
    if token is None:
        token = secrets.token_urlsafe(32)
        request.state.new_csrf_token = token
    return token


def check_csrf(request: Request, submitted: str | None) -> None:
    cookie = request.cookies.get(CSRF_COOKIE)
    if not cookie or not submitted or not hmac.compare_digest(cookie, submitted):
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
