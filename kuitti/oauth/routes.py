"""The consent page, the token endpoint, revocation, the membership page, and the discovery
documents (JWKS, RFC 8414 metadata).

Why one long module: the pages and endpoints of one flow, each thin, sharing the form and
redirect helpers at the top.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any
from urllib.parse import parse_qs

from fastapi import APIRouter, Depends, Header, Request
from pydantic import BaseModel
from sqlalchemy.orm import Session
from starlette.datastructures import FormData
from starlette.responses import HTMLResponse, Response

from kuitti.deps import RawBody, ReadSession, ServicesDep, WriteSession
from kuitti.errors import InvalidRequest, NotFound, Unauthorized
from kuitti.inputs import parse_json
from kuitti.metrics import OAUTH_DECISIONS, OAUTH_TOKEN_REQUESTS
from kuitti.models import Connection, Partner, User
from kuitti.oauth import keys
from kuitti.oauth import service as oauth
from kuitti.oauth.bearer import BEARER_NEEDED, app_partner
from kuitti.oauth.scopes import Scope, parse_scope, scope_string
from kuitti.oauth.tokens import verify_access_token
from kuitti.partners.auth import RequestCredentials
from kuitti.responses import ORJSONResponse
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.users import service as users
from kuitti.users.sessions import (
    CurrentUser,
    RequireUser,
    account_form,
    redirect,
    request_path,
)
from kuitti.web import check_csrf, render

router = APIRouter()


class AccessToken(BaseModel):
    token_type: str
    access_token: str
    scope: str
    service_id: str
    expires_in: int


class Revoked(BaseModel):
    service_id: str
    revoked: bool


NO_STORE = {"Cache-Control": "no-store", "Pragma": "no-cache"}


# --- Consent page (/auth) --------------------------------------------------------------------


def _error_page(request: Request, description: str) -> Response:
    return render(
        request,
        "oauth/error.html",
        {"description": description},
        status_code=400,
    )


def _consent_page(request: Request, auth: oauth.AuthorizationRequest, user: User) -> Response:
    return render(
        request,
        "oauth/consent.html",
        {
            "partner_name": auth.partner.name,
            "scopes": auth.scopes,
            "message": auth.content.message,
            "params": auth.parameters(),
            "user": user,
        },
    )


def _query_lists(request: Request) -> dict[str, list[str]]:
    params: dict[str, list[str]] = {}
    for key, value in request.query_params.multi_items():
        params.setdefault(key, []).append(value)
    return params


def _page(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/html": {"schema": {"type": "string"}}}}


# What the documented pages (/auth, /membership) share.
_PAGE_ROUTE: dict[str, Any] = {"tags": ["oauth"], "response_class": HTMLResponse}


@router.get(
    "/auth",
    summary="OAuth consent page",
    **_PAGE_ROUTE,
    responses={
        200: _page("The login page, then the consent page."),
        303: {
            "description": "Back to the app's redirect_uri with an OAuth error (RFC 6749 §4.1.2.1)."
        },
        400: _page("Unknown client or redirect_uri: an error page, never a redirect."),
    },
)
def authorize_page(request: Request, session: ReadSession, user: CurrentUser) -> Response:
    """The consent page: checks the request, asks the user to log in or sign up, then to consent."""
    try:
        auth = oauth.validate_authorization_request(session, _query_lists(request))
    except oauth.ClientRejected as exc:
        return _error_page(request, str(exc))
    except oauth.RedirectableError as exc:
        return redirect(request, exc.location())
    if user is None:
        return account_form(
            request,
            mode="login",
            next_path=request_path(request),
            heading=f"Log in to connect {auth.partner.name}",
            intro=(
                f"{auth.partner.name} asks to connect to your kuitti account. Log in, or sign up "
                "if you are new, to continue."
            ),
        )
    return _consent_page(request, auth, user)


async def _read_form(request: Request) -> FormData:
    """The posted form, read in the event loop; the handlers using it run in the thread pool
    (their database work is synchronous)."""
    return await request.form(max_files=0, max_fields=50)


PostedForm = Annotated[FormData, Depends(_read_form)]


@router.post("/auth", include_in_schema=False)
def authorize_decision(
    request: Request, services: ServicesDep, user: RequireUser, form: PostedForm
) -> Response:
    check_csrf(request, _form_str(form.get("csrf_token")))
    params: dict[str, list[str]] = {}
    for key in oauth.AUTH_PARAMETERS:
        values = [v for v in form.getlist(key) if isinstance(v, str)]
        if values:
            params[key] = values
    decision = form.get("decision")
    with services.db.session() as session:
        try:
            auth = oauth.validate_authorization_request(session, params)
        except oauth.ClientRejected as exc:
            return _error_page(request, str(exc))
        except oauth.RedirectableError as exc:
            return redirect(request, exc.location())
        if decision in ("approve", "deny"):
            OAUTH_DECISIONS.labels(decision).inc()
        match decision:
            case "approve":
                fresh = session.get(User, user.id)
                assert fresh is not None
                location = oauth.approve(session, auth, fresh, now=services.clock.now())
            case "deny":
                location = oauth.deny(auth)
            case _:
                return _consent_page(request, auth, user)
    return redirect(request, location)


def _form_str(value: object) -> str | None:
    return value if isinstance(value, str) else None


# --- Token endpoint --------------------------------------------------------------------------


def _token_error(error: oauth.OAuthError) -> ORJSONResponse:
    headers = dict(NO_STORE)
    if isinstance(error, oauth.InvalidClientError):
        headers["WWW-Authenticate"] = 'Basic realm="kuitti", error="invalid_client"'
    body = {**error.as_json(), "decription": error.description}
    return ORJSONResponse(body, status_code=error.status_code, headers=headers)


def _token_fields(content_type: str, body: bytes) -> dict[str, str]:
    media = content_type.split(";")[0].strip().lower()
    if media == "application/json":
        try:
            data = parse_json(body)
        except InvalidRequest as exc:
            raise oauth.InvalidRequestError(f"The body is not valid JSON: {exc}") from None
        if not isinstance(data, dict) or not all(
            isinstance(v, str) for v in data.values() if v is not None
        ):
            raise oauth.InvalidRequestError("The body must be a JSON object of strings.")
        return {k: v for k, v in data.items() if v is not None}
    if media == "application/x-www-form-urlencoded":
        try:
            parsed = parse_qs(body.decode(), keep_blank_values=True, strict_parsing=False)
        except UnicodeDecodeError:
            raise oauth.InvalidRequestError("The body is not UTF-8.") from None
        if any(len(v) > 1 for v in parsed.values()):
            raise oauth.InvalidRequestError("A parameter is given more than once.")
        return {k: v[0] for k, v in parsed.items()}
    raise oauth.InvalidRequestError("Send application/x-www-form-urlencoded or application/json.")


def _exchange(services: Services, request: oauth.TokenRequest) -> oauth.TokenResponse:
    with services.db.session() as session:
        try:
            return oauth.exchange_code(
                session, services.settings, request, now=services.clock.now()
            )
        except oauth.OAuthError as exc:
            refused = exc
    raise refused  # once the unit has committed: a replayed code's revocation must stick


@router.post(
    "/api/oauth/token",
    tags=["oauth"],
    summary="Exchange an authorization code for an access token",
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {"model": AccessToken},
        400: {"description": "RFC 6749 §5.2 error"},
        401: {"description": "invalid_client"},
    },
)
def token(
    services: ServicesDep,
    body: RawBody,
    content_type: Annotated[str, Header()] = "",
    authorization: Annotated[str | None, Header()] = None,
) -> ORJSONResponse:
    """The code exchange. JSON or form body; client authentication by HTTP Basic or in the body.
    The write unit opens only once the request's form has been checked."""
    try:
        request = oauth.token_request(_token_fields(content_type, body), authorization)
        result = _exchange(services, request)
    except oauth.OAuthError as exc:
        OAUTH_TOKEN_REQUESTS.labels(exc.error).inc()
        return _token_error(exc)
    OAUTH_TOKEN_REQUESTS.labels("issued").inc()
    return ORJSONResponse(result.as_json(), headers=NO_STORE)


# --- Revoke ----------------------------------------------------------------------------------


@router.delete(
    "/api/oauth/revoke",
    tags=["oauth"],
    summary="Revoke a user's connection with its access token",
    response_model=None,  # the answer is documented, not re-validated
    responses={200: {"model": Revoked}, 404: {"description": "unknown or already revoked"}},
)
def revoke(
    services: ServicesDep,
    session: WriteSession,
    credentials: RequestCredentials,
) -> dict[str, Any]:
    """Revoke: ends the connection (its ``service_id``) and with it every token; the partner
    gets no webhook for its own revoke."""
    token_value = credentials.bearer
    if token_value is None:
        raise Unauthorized(BEARER_NEEDED)
    now = services.clock.now()
    try:
        connection = verify_access_token(session, services.settings, token_value, now=now)
    except Unauthorized:
        raise NotFound("No active connection has this token.") from None
    if credentials.app_key is not None:
        partner = app_partner(session, credentials.app_key)
        if partner is None or partner.id != connection.partner_id:
            raise Unauthorized("The SERVICE_APIKEY does not belong to this token's partner.")
    connection.revoked_at = now
    connection.updated_at = now
    return {"service_id": str(connection.id), "revoked": True}


# --- discovery --------------------------------------------------------------------------------


@router.get("/.well-known/jwks.json", tags=["oauth"], summary="Token signing keys (JWKS)")
def jwks(services: ServicesDep, session: ReadSession) -> ORJSONResponse:
    body = keys.jwks(session)
    if not body["keys"]:
        # Publish a key before the first token is signed, so clients can cache it.
        with services.db.session() as write:
            keys.current_key(write, _box(services), now=services.clock.now())
            body = keys.jwks(write)
    return ORJSONResponse(body, headers={"Cache-Control": "public, max-age=300"})


def _box(services: ServicesDep) -> SecretBox:
    return SecretBox(services.settings.resolved_secret_key)


@router.get(
    "/.well-known/oauth-authorization-server",
    tags=["oauth"],
    summary="Authorization server metadata (RFC 8414)",
)
def metadata(services: ServicesDep) -> dict[str, Any]:
    settings = services.settings
    return {
        "issuer": settings.issuer,
        "authorization_endpoint": f"{settings.auth_base}/auth",
        "token_endpoint": f"{settings.base_url}/api/oauth/token",
        "revocation_endpoint": f"{settings.base_url}/api/oauth/revoke",
        "jwks_uri": f"{settings.base_url}/.well-known/jwks.json",
        "scopes_supported": [s.value for s in Scope],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code"],
        "token_endpoint_auth_methods_supported": [
            "client_secret_basic",
            "client_secret_post",
            "none",
        ],
        "code_challenge_methods_supported": ["S256"],
        "service_documentation": f"{settings.base_url}/docs",
    }


# --- Membership page -------------------------------------------------------------------------


def _owned_connection(session: Session, user: User, service_id: str | None) -> Connection | None:
    try:
        connection_id = uuid.UUID(service_id or "")
    except ValueError:
        return None
    connection = session.get(Connection, connection_id)
    if connection is None or connection.user_id != user.id or not connection.active:
        return None
    return connection


def _not_yours(request: Request) -> Response:
    return render(
        request,
        "oauth/error.html",
        {
            "title": "No such connection",
            "description": "You have no active connection with this identifier. "
            "Your connections are listed on your account page.",
        },
        status_code=404,
    )


def _membership_target(
    request: Request, session: Session, user: User, service_id: str | None, redirect_uri: str | None
) -> tuple[Connection, Partner, str] | Response:
    connection = _owned_connection(session, user, service_id)
    if connection is None:
        return _not_yours(request)
    partner = session.get(Partner, connection.partner_id)
    assert partner is not None
    if not redirect_uri or redirect_uri not in partner.redirect_uris:
        return _error_page(
            request,
            "The return address is not registered for this application, so you are not sent "
            "back there. Your connection is unchanged.",
        )
    return connection, partner, redirect_uri


def _membership_form(
    request: Request,
    connection: Connection,
    partner: Partner,
    redirect_uri: str,
    *,
    error: str | None = None,
    status_code: int = 200,
) -> Response:
    """The membership page: the connection's scopes to keep, change or remove."""
    return render(
        request,
        "oauth/membership.html",
        {
            "connection": connection,
            "partner_name": partner.name,
            "granted": parse_scope(connection.scope) or [],
            "all_scopes": list(Scope),
            "redirect_uri": redirect_uri,
            "error": error,
        },
        status_code=status_code,
    )


@router.get(
    "/membership",
    summary="Manage a connection",
    **_PAGE_ROUTE,
    responses={
        200: _page("The connection's page for its owner."),
        303: {
            "description": "Logged out: to the login page, which returns here (the body: "
            "`login_required` in the error shape).",
            "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Errors"}}},
        },
        400: _page("The redirect_uri is not the app's (an HTML page)."),
        404: _page("No such connection of this user (an HTML page)."),
    },
)
def membership_page(
    request: Request,
    session: ReadSession,
    user: RequireUser,
    service_id: str | None = None,
    redirect_uri: str | None = None,
) -> Response:
    """The membership page: the connection's owner keeps, changes or removes it."""
    target = _membership_target(request, session, user, service_id, redirect_uri)
    if isinstance(target, Response):
        return target
    connection, partner, uri = target
    return _membership_form(request, connection, partner, uri)


@router.post("/membership", include_in_schema=False)
def membership_submit(
    request: Request, services: ServicesDep, user: RequireUser, form: PostedForm
) -> Response:
    check_csrf(request, _form_str(form.get("csrf_token")))
    action = _form_str(form.get("action"))
    chosen = [v for v in form.getlist("scope") if isinstance(v, str)]
    now = services.clock.now()
    with services.db.session() as session:
        target = _membership_target(
            request,
            session,
            user,
            _form_str(form.get("service_id")),
            _form_str(form.get("redirect_uri")),
        )
        if isinstance(target, Response):
            return target
        connection, partner, uri = target
        match action:
            case "keep":
                status = "cancelled"
            case "modify":
                scopes = parse_scope(" ".join(chosen)) if chosen else None
                if scopes is None:
                    return _membership_form(
                        request,
                        connection,
                        partner,
                        uri,
                        error="Choose at least one permission, or remove the connection.",
                        status_code=400,
                    )
                connection.scope = scope_string(scopes)
                connection.updated_at = now
                status = "modified"
            case "remove":
                users.revoke_connection(session, connection, now=now)
                status = "removed"
            case _:
                return _error_page(request, "Choose keep, change or remove.")
        location = oauth.with_query(uri, {"status": status, "service_id": str(connection.id)}, None)
    return redirect(request, location)
