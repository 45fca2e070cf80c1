"""The service user's pages: login and sign-up (``sessions``), e-mail verification, password
reset, and the account page (``account``)."""

from __future__ import annotations

import uuid
from typing import Annotated

import orjson
from fastapi import APIRouter, Form, Request
from starlette.responses import Response

from kuitti.clock import as_utc
from kuitti.deps import ReadSession, ServicesDep, WriteSession
from kuitti.i18n import Language
from kuitti.links import private_link
from kuitti.models import Connection, User
from kuitti.receipts.relations import relations
from kuitti.receipts.view import format_money, relation_lines
from kuitti.users import service as users
from kuitti.users.sessions import CurrentUser, RequireUser, redirect
from kuitti.users.sessions import router as sessions_router
from kuitti.web import SESSION_COOKIE, CsrfForm, check_csrf, render

# The account page writes amounts the Finnish way with the currency code: "14,98 EUR".
ACCOUNT_LOCALE = "fi"

router = APIRouter(include_in_schema=False)
router.include_router(sessions_router)

PasswordForm = Annotated[str, Form(max_length=users.MAX_PASSWORD_LENGTH)]


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


def _account_message(request: Request, title: str, *lines: str, status_code: int = 200) -> Response:
    """A message page whose link leads back to the account page."""
    return message_page(
        request, title, *lines, link=("/account", "Your account"), status_code=status_code
    )


@router.get("/verify-email/{token}")
def verify_email(
    request: Request, token: str, services: ServicesDep, session: WriteSession
) -> Response:
    user = users.verify_email(session, token, now=services.clock.now())
    if user is None:
        return _account_message(
            request,
            "This link does not work",
            "The link has been used already or has expired. You can ask for a new one on your "
            "account page.",
            status_code=400,
        )
    return _account_message(
        request,
        "Your e-mail address is confirmed",
        f"Receipts sent to {user.email} now reach your kuitti account.",
    )


@router.post("/verify-email")
def resend_verification(
    request: Request,
    services: ServicesDep,
    user: RequireUser,
    csrf_token: CsrfForm = None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
        if user.email_verified_at is None:
            users.send_verification_mail(session, services.settings, user, now=services.clock.now())
    return _account_message(
        request,
        "Check your e-mail",
        f"We sent a new confirmation link to {user.email}.",
    )


@router.get("/password-reset")
def password_reset_page(request: Request, user: CurrentUser) -> Response:
    return render(request, "users/password_reset.html", {"email": user.email if user else ""})


@router.post("/password-reset")
def password_reset_request(
    request: Request,
    services: ServicesDep,
    email: Annotated[str, Form(max_length=320)] = "",
    csrf_token: CsrfForm = None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
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
    password: PasswordForm = "",
    csrf_token: CsrfForm = None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
        try:
            user = users.reset_password(session, token, password, now=services.clock.now())
        except users.UserInputError as exc:
            return render(
                request,
                "users/new_password.html",
                {"token": token, "error": str(exc)},
                status_code=400,
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


# --- the account page -----------------------------------------------------------------------


@router.get("/account")
def account_page(
    request: Request, services: ServicesDep, session: ReadSession, user: RequireUser
) -> Response:
    settings = services.settings
    receipts = [
        {
            "merchant_name": r.merchant_name,
            "receipt_time": as_utc(r.receipt_time),
            "total": format_money(r.total, r.currency, ACCOUNT_LOCALE, code=True),
            "link": private_link(settings, r.id),
            "relations": relation_lines(relations(session, r), Language.EN),
        }
        for r in users.user_receipts(session, user.id)
    ]
    return render(
        request,
        "users/account.html",
        {
            "user": user,
            "connections": users.user_connections(session, user.id),
            "receipts": receipts,
            "error": None,
        },
    )


@router.post("/account/connections/{service_id}/remove")
def remove_connection(
    request: Request,
    service_id: str,
    services: ServicesDep,
    user: RequireUser,
    csrf_token: CsrfForm = None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
        try:
            connection = session.get(Connection, uuid.UUID(service_id))
        except ValueError:
            connection = None
        # Someone else's connection looks exactly like one that does not exist.
        if connection is not None and connection.user_id == user.id:
            users.revoke_connection(session, connection, now=services.clock.now())
        return redirect(request, "/account")


@router.get("/account/export")
def export(services: ServicesDep, session: ReadSession, user: RequireUser) -> Response:
    data = users.export_data(session, user)
    stamp = services.clock.now().strftime("%Y%m%d")
    return Response(
        orjson.dumps(data, option=orjson.OPT_INDENT_2),
        media_type="application/json",
        headers={
            "Content-Disposition": f'attachment; filename="kuitti-export-{stamp}.json"',
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


@router.post("/account/delete")
def delete_account(
    request: Request,
    services: ServicesDep,
    user: RequireUser,
    password: PasswordForm = "",
    csrf_token: CsrfForm = None,
) -> Response:
    check_csrf(request, csrf_token)
    with services.db.session() as session:
        fresh = session.get(User, user.id)
        assert fresh is not None
        if not users.password_matches(fresh.password_hash, password):
            return message_page(
                request,
                "The account was not deleted",
                "The password was wrong. Nothing was changed.",
                link=("/account", "Back to your account"),
                status_code=400,
            )
        users.delete_account(session, fresh, now=services.clock.now())
        response = message_page(
            request,
            "Your account is deleted",
            "Your connections were removed and the applications were told. Your e-mail address "
            "and password are gone from kuitti.",
        )
        response.delete_cookie(SESSION_COOKIE, path="/", httponly=True, samesite="lax")
        return response
