"""Login sessions of service users, and the login, sign-up and logout pages.

The session cookie (``kuitti_session``) carries a random token; the database keeps its digest
(``UserSession``), so logout and password reset end sessions at once on every instance. Cookies
are ``HttpOnly``, ``SameSite=Lax`` and ``Secure`` when the pages are served over https.

Login and sign-up share one form (``email``, ``password``) told apart by the submit button
(``action=login`` / ``action=signup``). Each page honours ``next``, which must be a path on this
site (never another host).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated
from urllib.parse import quote, urlsplit

from fastapi import APIRouter, Depends, Form, Request
from fastapi.responses import RedirectResponse
from sqlalchemy.orm import Session
from starlette.responses import Response

from kuitti.clients import client_address
from kuitti.deps import Now, ReadSession, ServicesDep, release_connection
from kuitti.errors import KuittiError
from kuitti.metrics import LOGINS
from kuitti.models import User
from kuitti.services import Services
from kuitti.users import service as users
from kuitti.web import (
    SESSION_COOKIE,
    CsrfForm,
    check_csrf,
    render,
    renew_csrf_token,
    secure_cookies,
    set_page_headers,
)

DEFAULT_NEXT = "/account"
MAX_NEXT_CHARS = 4000

router = APIRouter(include_in_schema=False)


def safe_next(value: str | None, default: str = DEFAULT_NEXT) -> str:
    """``value`` when it is a path on this site, else ``default`` (no open redirect: no scheme,
    no host, no ``//`` or backslash tricks, no control characters)."""
    if not value or len(value) > MAX_NEXT_CHARS:
        return default
    if not value.startswith("/") or value.startswith(("//", "/\\")):
        return default
    if "\\" in value or any(ord(c) < 0x20 or ord(c) == 0x7F for c in value):
        return default
    parts = urlsplit(value)
    if parts.scheme or parts.netloc:
        return default
    return value


def login_url(next_path: str) -> str:
    return "/login?next=" + quote(next_path, safe="")


def request_path(request: Request) -> str:
    query = request.url.query
    return request.url.path + (f"?{query}" if query else "")


class LoginRequired(KuittiError):
    """Sends the browser to the login page, coming back to ``next`` afterwards."""

    status_code = 303
    code = "login_required"

    def __init__(self, next_path: str) -> None:
        super().__init__("Log in to continue.")
        self.next_path = next_path

    def headers(self) -> dict[str, str]:
        return {"Location": login_url(self.next_path), "Cache-Control": "no-store"}


def _current_user(request: Request, session: ReadSession, now: Now) -> User | None:
    token = request.cookies.get(SESSION_COOKIE)
    if not token:
        return None
    user = users.user_for_session(session, token, now=now)
    release_connection(session, user)
    return user


CurrentUser = Annotated[User | None, Depends(_current_user)]


def _require_user(request: Request, user: CurrentUser) -> User:
    if user is None:
        path = request_path(request) if request.method == "GET" else request.url.path
        raise LoginRequired(safe_next(path))
    return user


RequireUser = Annotated[User, Depends(_require_user)]


def set_session_cookie(request: Request, response: Response, token: str) -> None:
    response.set_cookie(
        SESSION_COOKIE,
        token,
        max_age=users.SESSION_TTL_SECONDS,
        httponly=True,
        samesite="lax",
        secure=secure_cookies(request),
        path="/",
    )


def redirect(request: Request, location: str) -> Response:
    return set_page_headers(request, RedirectResponse(location, status_code=303))


def account_form(
    request: Request,
    *,
    mode: str,
    next_path: str,
    error: str | None = None,
    email: str = "",
    status_code: int = 200,
    heading: str | None = None,
    intro: str | None = None,
) -> Response:
    return render(
        request,
        "users/login.html",
        {
            "mode": mode,
            "next": next_path,
            "error": error,
            "email": email,
            "heading": heading,
            "intro": intro,
        },
        status_code=status_code,
    )


@router.get("/login")
def login_page(request: Request, user: CurrentUser, next: str | None = None) -> Response:
    return _form_unless_logged_in(request, user, "login", next)


@router.get("/signup")
def signup_page(request: Request, user: CurrentUser, next: str | None = None) -> Response:
    return _form_unless_logged_in(request, user, "signup", next)


def _form_unless_logged_in(
    request: Request, user: User | None, mode: str, next_path: str | None
) -> Response:
    """The login or sign-up form; someone already logged in goes straight on to ``next``."""
    target = safe_next(next_path)
    if user is not None:
        return redirect(request, target)
    return account_form(request, mode=mode, next_path=target)


def _submit(
    request: Request,
    services: ServicesDep,
    *,
    action: str,
    email: str,
    password: str,
    next_path: str,
    csrf_token: str | None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
        return _log_in_or_sign_up(
            request,
            services,
            session,
            action=action,
            email=email,
            password=password,
            target=safe_next(next_path),
        )


def _log_in_or_sign_up(
    request: Request,
    services: Services,
    session: Session,
    *,
    action: str,
    email: str,
    password: str,
    target: str,
) -> Response:
    now = services.clock.now()
    if action == "signup":
        try:
            user = users.create_user(session, email, password, now=now, verified=False)
        except users.UserInputError as exc:
            return account_form(
                request,
                mode="signup",
                next_path=target,
                error=f"The account was not created: {exc}.",
                email=email,
                status_code=400,
            )
        users.send_verification_mail(session, services.settings, user, now=now)
    elif action == "login":
        try:
            found = users.authenticate(
                session, email, password, client=client_address(request), now=now
            )
        except users.LoginThrottled as exc:
            LOGINS.labels("throttled").inc()
            return account_form(
                request,
                mode="login",
                next_path=target,
                error=str(exc),
                email=email,
                status_code=429,
            )
        LOGINS.labels("ok" if found else "failed").inc()
        if found is None:
            return account_form(
                request,
                mode="login",
                next_path=target,
                error="The e-mail address or the password is wrong.",
                email=email,
                status_code=400,
            )
        user = found
    else:
        return account_form(
            request,
            mode="login",
            next_path=target,
            error="Choose log in or sign up.",
            status_code=400,
        )
    users.end_session(session, request.cookies.get(SESSION_COOKIE))
    token = users.start_session(session, user, now=now)
    renew_csrf_token(request, token)
    response = redirect(request, target)
    set_session_cookie(request, response, token)
    return response


def _submit_endpoint(default_action: str) -> Callable[..., Response]:
    """The POST handler of one account page: the login and the sign-up page post the same form
    to ``_submit`` and differ only in the action taken when the form names none."""

    def submit(
        request: Request,
        services: ServicesDep,
        email: Annotated[str, Form(max_length=320)] = "",
        password: Annotated[str, Form(max_length=users.MAX_PASSWORD_LENGTH)] = "",
        action: Annotated[str, Form()] = default_action,
        next: Annotated[str, Form()] = DEFAULT_NEXT,
        csrf_token: CsrfForm = None,
    ) -> Response:
        return _submit(
            request,
            services,
            action=action,
            email=email,
            password=password,
            next_path=next,
            csrf_token=csrf_token,
        )

    return submit


login_submit = router.post("/login", name="login_submit")(_submit_endpoint("login"))
signup_submit = router.post("/signup", name="signup_submit")(_submit_endpoint("signup"))


@router.post("/logout")
def logout(
    request: Request,
    services: ServicesDep,
    next: Annotated[str, Form()] = "/login",
    csrf_token: CsrfForm = None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
        users.end_session(session, request.cookies.get(SESSION_COOKIE))
    response = redirect(request, safe_next(next, "/login"))
    response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
    return response
