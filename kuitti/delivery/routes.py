"""The receipt link pages (docs/delivery.md, "Receipt links") and the dynamic QR code endpoint.

Link pages need no login: ``/ns/<namespace>/r/<receipt_id>`` (a RECEIPT_ID token) and
``/r/<token>`` (every receipt's private link), each with ``/pdf`` for the PDF and a ``POST`` whose
``action=import`` puts the receipt into the logged-in user's account (through a namespace link
only if no other account holds it, unless the link is shareable: 409 otherwise). Anything unknown
is the same friendly 404 page. Every answer carries ``X-Robots-Tag: noindex`` and
``Referrer-Policy: no-referrer`` and counts against the per-client rate limit; a lookup that
finds nothing counts against the miss limits too (``ratelimit.LinkMisses``).
"""

from __future__ import annotations

from typing import Annotated, Any
from urllib.parse import quote, unquote

from fastapi import APIRouter, Form, Query, Request
from fastapi.responses import HTMLResponse, RedirectResponse
from pydantic import BaseModel
from sqlalchemy.orm import Session
from starlette.responses import Response

from kuitti import links
from kuitti.clients import client_address
from kuitti.delivery import qr
from kuitti.delivery.linkpage import LinkPage, language_links, page_context, page_language
from kuitti.delivery.service import import_from_link
from kuitti.delivery.texts import page_text
from kuitti.deps import Now, ReadSession, ServicesDep, get_services
from kuitti.logs import log
from kuitti.metrics import LINK_MISS_BURSTS, LINK_MISSES, LINK_RATE_LIMITED
from kuitti.models import Connection, Receipt, User
from kuitti.oauth.bearer import AppConnection
from kuitti.receipts.formats.rendering import render_service_pdf
from kuitti.users.sessions import CurrentUser, login_url
from kuitti.web import CsrfForm, check_csrf
from kuitti.web import render as render_page

router = APIRouter(tags=["receipt links"])

LINK_HEADERS = {"X-Robots-Tag": "noindex, nofollow", "Referrer-Policy": "no-referrer"}
_HTML = {"text/html": {"schema": {"type": "string"}}}
_PDF = {"application/pdf": {"schema": {"type": "string", "format": "binary"}}}
LIMITED = {
    "description": "Too many link requests, or too many that found nothing, from this client "
    "(an HTML page; Retry-After).",
    "content": _HTML,
}
NOT_FOUND = {
    "description": "Unknown link, or nothing to import from it (an HTML page).",
    "content": _HTML,
}
# What the link pages answer besides their page (declared once, used by each route).
PAGE_ANSWERS: dict[int | str, dict[str, Any]] = {404: NOT_FOUND, 429: LIMITED}
IMPORT_ANSWERS: dict[int | str, dict[str, Any]] = {
    303: {
        "description": "Imported: back to the page; or, logged out, to the login page that "
        "returns to it."
    },
    403: {"description": "The form has expired or did not come from this site."},
    409: {"description": "Another account holds this receipt (an HTML page).", "content": _HTML},
    **PAGE_ANSWERS,
}
# Any value is accepted: one that is not fi, sv or en is ignored (Accept-Language decides).
LangQuery = Annotated[str | None, Query(description="fi, sv or en; else Accept-Language decides.")]


class QrCode(BaseModel):
    value: str
    namespace: str
    expires_at: str


# -- dynamic QR codes -------------------------------------------------------------------------


@router.post(
    "/api/v1/qr-codes/",
    summary="Get a short-lived DYNAMIC_QR_CODE value for the user of this connection",
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {"model": QrCode, "description": '{"value", "namespace", "expires_at"}'},
        401: {"description": "Missing or invalid SERVICE_APIKEY or Bearer token."},
        403: {"description": "The application has no namespace."},
    },
)
def create_qr_code(connection: AppConnection, services: ServicesDep, now: Now) -> dict[str, str]:
    with services.db.session() as session:
        current = session.get(Connection, connection.id)
        assert current is not None
        issued = qr.issue_qr_code(
            session, current, ttl_seconds=services.settings.qr_code_ttl_seconds, now=now
        )
    return issued.as_json()


# -- link pages -------------------------------------------------------------------------------


def _limited(request: Request, target: LinkPage) -> Response | None:
    """The 429 page when this client is over the link-page limit, or may look up no link of
    this kind for now because of its misses (``LinkMisses``)."""
    services = get_services(request)
    client = client_address(request)
    now = services.clock.now().timestamp()
    retry_after = services.link_rate_limiter.hit(client, now)
    if retry_after is None:
        retry_after = services.link_misses.refused(client, target.namespace, now)
    if retry_after is None:
        return None
    LINK_RATE_LIMITED.inc()
    lang = page_language(request, None)
    return render_page(
        request,
        "receipts/message.html",
        {
            "lang": lang,
            "title": page_text("rate_limited.title", lang),
            "body": page_text("rate_limited.body", lang),
        },
        status_code=429,
        headers={**LINK_HEADERS, "Retry-After": str(retry_after)},
    )


def _missed(request: Request, target: LinkPage, lang: str | None) -> Response:
    """The 404 page of a lookup that found nothing, counted against the miss limits; the miss
    that starts a burst is logged at warning level and counted (the alert)."""
    services = get_services(request)
    client = client_address(request)
    LINK_MISSES.inc()
    for scope in services.link_misses.missed(
        client, target.namespace, services.clock.now().timestamp()
    ):
        LINK_MISS_BURSTS.labels(scope.value).inc()
        log.warning(
            "receipt-link miss burst",
            scope=scope.value,
            client=client,
            namespace=target.namespace,
        )
    return _not_found(request, lang)


def _not_found(request: Request, lang: str | None) -> Response:
    return _message(request, lang, "not_found", 404, _quoted_path(request))


def _claimed(request: Request, target: LinkPage, lang: str | None) -> Response:
    """The 409 page: another account holds this namespace link's receipt."""
    return _message(request, lang, "claimed", 409, target.path)


def _message(request: Request, lang: str | None, key: str, status_code: int, path: str) -> Response:
    """A message page (``key``'s title and body) with the language switch for ``path``."""
    language = page_language(request, lang)
    return render_page(
        request,
        "receipts/message.html",
        {
            "lang": language.value,
            "title": page_text(f"{key}.title", language),
            "body": page_text(f"{key}.body", language),
            "languages": language_links(path, language),
            "language_label": page_text("page.language", language),
        },
        status_code=status_code,
        headers=LINK_HEADERS,
    )


def _quoted_path(request: Request) -> str:
    """The request path as the client sent it, percent-encoded (for links back to it)."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    return quote(raw.decode("latin-1"), safe="/%:@!$&'()*+,;=-._~")


def _namespace_link_parts(request: Request) -> tuple[str, str, bool] | None:
    """(namespace, identifier, is_pdf) from the raw path, so an identifier may hold an encoded
    ``/`` (``%2F``) without being split."""
    raw: bytes = request.scope.get("raw_path") or request.url.path.encode()
    segments = raw.decode("latin-1").split("/")
    # ['', 'ns', <namespace>, 'r', <identifier>] (+ ['pdf'])
    if len(segments) not in (5, 6) or segments[1] != "ns" or segments[3] != "r":
        return None
    is_pdf = len(segments) == 6
    if is_pdf and segments[5] != "pdf":
        return None
    namespace, identifier = unquote(segments[2]), unquote(segments[4])
    if not namespace or not identifier:
        return None
    return namespace, identifier, is_pdf


def _find(request: Request, session: Session, target: LinkPage) -> Receipt | None:
    if target.namespace is not None:
        return links.receipt_for_namespace_link(session, target.namespace, target.key)
    return links.receipt_for_private_token(session, get_services(request).settings, target.key)


def _show(
    request: Request,
    session: Session,
    target: LinkPage,
    lang: str | None,
    user: User | None = None,
) -> Response:
    """The page or its PDF, read through the request's session; with a read replica, the
    receipt is found and rendered there, and through the request's session (the primary) only
    when the replica does not hold it yet or is away. Whether the user holds it (the import's
    own write) is read on the primary."""
    if (limited := _limited(request, target)) is not None:
        return limited
    replica = get_services(request).replica
    if replica is not None:
        shown = replica.read(
            lambda on_replica: _shown(request, on_replica, session, target, lang, user)
        )
        if shown is not None:
            return shown
    answer = _shown(request, session, session, target, lang, user)
    if answer is None:
        return _missed(request, target, lang)
    return answer


def _shown(
    request: Request,
    documents: Session,
    session: Session,
    target: LinkPage,
    lang: str | None,
    user: User | None,
) -> Response | None:
    """The page or its PDF of the receipt found through ``documents``, or None."""
    receipt = _find(request, documents, target)
    if receipt is None:
        return None
    if target.pdf:
        return _pdf(documents, receipt, page_language(request, lang))
    context = page_context(
        request,
        documents,
        receipt,
        target,
        lang,
        user=user,
        imported=request.query_params.get("imported") == "1",
        owners=session,
    )
    return render_page(request, "receipts/link.html", context, headers=LINK_HEADERS)


def _pdf(session: Session, receipt: Receipt, language: str) -> Response:
    rendered = render_service_pdf(session, receipt, locale=language)
    return Response(
        rendered.content,
        media_type=rendered.media_type,
        headers={
            **LINK_HEADERS,
            "Content-Disposition": f'attachment; filename="{rendered.filename}"',
            "Cache-Control": "no-store",
            "X-Content-Type-Options": "nosniff",
        },
    )


def _import(
    request: Request,
    session: Session,
    target: LinkPage,
    user: User | None,
    action: str,
    csrf: str | None,
) -> Response:
    if (limited := _limited(request, target)) is not None:
        return limited
    check_csrf(request, csrf)
    receipt = _find(request, session, target)
    if receipt is None:
        return _missed(request, target, request.query_params.get("lang"))
    if receipt.sandbox or action != "import":
        # A sandbox receipt is nobody's: there is nothing to import (docs/sandbox.md).
        return _not_found(request, request.query_params.get("lang"))
    lang = request.query_params.get("lang")
    services = get_services(request)
    if user is None:
        # Log in or sign up, then back to this page, whose form posts the import again.
        return RedirectResponse(
            login_url(target.page_path(lang)), status_code=303, headers=LINK_HEADERS
        )
    receipt_id, user_id = receipt.id, user.id
    claim = target.namespace is not None and not links.is_shareable(
        session, target.namespace, target.key
    )
    session.rollback()  # one connection at a time: the read's goes back before the write's
    with services.db.session() as write:
        current = write.get(Receipt, receipt_id)
        assert current is not None
        imported = import_from_link(write, current, user_id, claim=claim, now=services.clock.now())
    if not imported:
        return _claimed(request, target, lang)
    back = target.page_path(lang, imported=True)
    return RedirectResponse(back, status_code=303, headers=LINK_HEADERS)


@router.get(
    "/ns/{namespace}/r/{receipt_path:path}",
    response_class=HTMLResponse,
    summary="Receipt link page; <link>/pdf downloads the PDF",
    responses={
        200: {"description": "The page, or at <link>/pdf its PDF.", "content": {**_HTML, **_PDF}},
        **PAGE_ANSWERS,
    },
)
def namespace_link_page(
    request: Request,
    namespace: str,
    receipt_path: str,
    session: ReadSession,
    user: CurrentUser,
    lang: LangQuery = None,
) -> Response:
    parts = _namespace_link_parts(request)
    if parts is None:
        return _not_found(request, lang)
    ns, identifier, is_pdf = parts
    return _show(request, session, LinkPage(ns, identifier, pdf=is_pdf), lang, user)


@router.post(
    "/ns/{namespace}/r/{receipt_path:path}",
    response_class=HTMLResponse,
    summary="Import the receipt into the logged-in user's account (action=import)",
    responses=IMPORT_ANSWERS,
)
def namespace_link_import(
    request: Request,
    namespace: str,
    receipt_path: str,
    session: ReadSession,
    user: CurrentUser,
    action: Annotated[str, Form()],
    csrf_token: CsrfForm = None,
) -> Response:
    parts = _namespace_link_parts(request)
    if parts is None or parts[2]:
        return _not_found(request, request.query_params.get("lang"))
    return _import(request, session, LinkPage(parts[0], parts[1]), user, action, csrf_token)


@router.get(
    "/r/{token}",
    response_class=HTMLResponse,
    summary="A receipt's private link page (no login)",
    responses=PAGE_ANSWERS,
)
def private_link_page(
    request: Request, token: str, session: ReadSession, user: CurrentUser, lang: LangQuery = None
) -> Response:
    return _show(request, session, LinkPage(None, token), lang, user)


@router.get(
    "/r/{token}/pdf",
    response_class=Response,
    summary="The PDF of a receipt's private link",
    responses={200: {"description": "The receipt's PDF.", "content": _PDF}, **PAGE_ANSWERS},
)
def private_link_pdf(
    request: Request, token: str, session: ReadSession, lang: LangQuery = None
) -> Response:
    return _show(request, session, LinkPage(None, token, pdf=True), lang)


@router.post(
    "/r/{token}",
    response_class=HTMLResponse,
    summary="Import the receipt of a private link (action=import)",
    responses=IMPORT_ANSWERS,
)
def private_link_import(
    request: Request,
    token: str,
    session: ReadSession,
    user: CurrentUser,
    action: Annotated[str, Form()],
    csrf_token: CsrfForm = None,
) -> Response:
    return _import(request, session, LinkPage(None, token), user, action, csrf_token)
