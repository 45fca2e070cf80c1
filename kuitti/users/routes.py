"""The service user's pages: login and sign-up (``sessions``), e-mail verification, password
reset, and the account page (``account``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Form, Request
from starlette.responses import Response

from kuitti.deps import ServicesDep, WriteSession
from kuitti.users import service as users
from kuitti.users.sessions import CurrentUser, RequireUser, redirect
from kuitti.users.sessions import router as sessions_router
from kuitti.web import check_csrf, render

router = APIRouter(include_in_schema=False)
router.include_router(sessions_router)


def message_page(
    request: Request,
    title: str,
    *lines: str,
    link: tuple[str, str] | None = None,
    status_code: int = 200,
) -> Response:
    return render(
        request,
        "users/message.html",
        {
            "title": title,
            "lines": lines,
            "link": {"href": link[0], "text": link[1]} if link else None,
        },
        status_code=status_code,
    )


@router.get("/verify-email/{token}")
def verify_email(
    request: Request, token: str, services: ServicesDep, session: WriteSession
) -> Response:
    user = users.verify_email(session, token, now=services.clock.now())
    if user is None:
        return message_page(
            request,
            "This link does not work",
            "The link has been used already or has expired. You can ask for a new one on your "
            "account page.",
            link=("/account", "Your account"),
            status_code=400,
        )
    return message_page(
        request,
        "Your e-mail address is confirmed",
        f"Receipts sent to {user.email} now reach your kuitti account.",
        link=("/account", "Your account"),
    )


@router.post("/verify-email")
def resend_verification(
    request: Request,
    services: ServicesDep,
    session: WriteSession,
    user: RequireUser,
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    check_csrf(request, csrf_token)
    if user.email_verified_at is None:
        users.send_verification_mail(session, services.settings, user, now=services.clock.now())
    return message_page(
        request,
        "Check your e-mail",
        f"We sent a new confirmation link to {user.email}.",
        link=("/account", "Your account"),
    )


@router.get("/password-reset")
def password_reset_page(request: Request, user: CurrentUser) -> Response:
    return render(request, "users/password_reset.html", {"email": user.email if user else ""})


@router.post("/password-reset")
def password_reset_request(
    request: Request,
    services: ServicesDep,
    session: WriteSession,
    email: Annotated[str, Form(max_length=320)] = "",
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    check_csrf(request, csrf_token)
    users.request_password_reset(session, services.settings, email, now=services.clock.now())
    # The same answer whether or not the address has an account (no address probing).
    return message_page(
        request,
        "Check your e-mail",
        "If an account has that address, a link to choose a new password is on its way. "
        "The link works for one hour.",
    )


@router.get("/password-reset/{token}")
def new_password_page(
    request: Request, token: str, services: ServicesDep, session: WriteSession
) -> Response:
    row = users.peek_user_token(
        session, token, users.TokenPurpose.RESET_PASSWORD, now=services.clock.now()
    )
    if row is None:
        return _dead_reset_link(request)
    return render(request, "users/new_password.html", {"token": token, "error": None})


@router.post("/password-reset/{token}")
def new_password_submit(
    request: Request,
    token: str,
    services: ServicesDep,
    session: WriteSession,
    password: Annotated[str, Form(max_length=users.MAX_PASSWORD_LENGTH)] = "",
    csrf_token: Annotated[str | None, Form()] = None,
) -> Response:
    check_csrf(request, csrf_token)
    try:
        user = users.reset_password(session, token, password, now=services.clock.now())
    except users.UserInputError as exc:
        return render(
            request, "users/new_password.html", {"token": token, "error": str(exc)}, status_code=400
        )
    if user is None:
        return _dead_reset_link(request)
    return redirect(request, "/login?reset=1")


def _dead_reset_link(request: Request) -> Response:
    return message_page(
        request,
        "This link does not work",
        "The link has been used already or has expired. Ask for a new one.",
        link=("/password-reset", "Reset the password"),
        status_code=400,
    )
