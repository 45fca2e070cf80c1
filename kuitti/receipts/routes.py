"""Endpoints 1–3: create, read and list receipts. Thin: check the caller, call the service."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Header, Query, Request
from fastapi.responses import Response
from starlette.concurrency import run_in_threadpool

from kuitti.deps import Now, ServicesDep
from kuitti.errors import ErrorDetail, InvalidRequest, NotFound, Unauthorized
from kuitti.i18n import as_language, negotiate_locale
from kuitti.models import Partner
from kuitti.oauth.bearer import reading_connection
from kuitti.partners.auth import ServiceApiKey, authenticate_partner_id
from kuitti.receipts import readers
from kuitti.receipts.answers import ReceiptCreated, ReceiptList
from kuitti.receipts.formats import DataFormat
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.formats.rendering import etag, render
from kuitti.receipts.ingest import IDEMPOTENCY_KEY_MAX, Ingest
from kuitti.receipts.readers import Reader
from kuitti.receipts.relations import relations
from kuitti.responses import ORJSONResponse
from kuitti.services import Services

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])


def _authenticated_reader(
    services: Services,
    now: datetime,
    app_key: str | None,
    authorization: str | None,
) -> Reader:
    """A partner by its API key, or a partner app on behalf of a user (``SERVICE_APIKEY`` +
    ``Authorization: Bearer``)."""
    with services.db.session(write=False) as session:
        if authorization and authorization.lower().startswith("bearer "):
            if not app_key:
                raise Unauthorized("User-authorized reading needs the SERVICE_APIKEY header too.")
            token = authorization[7:].strip()
            connection = reading_connection(session, services.settings, app_key, token, now=now)
            app = session.get(Partner, connection.partner_id)
            sandbox = app is not None and app.sandbox
            return Reader(
                partner_id=connection.partner_id, user_id=connection.user_id, sandbox=sandbox
            )
        partner_id, sandbox = authenticate_partner_id(session, authorization or app_key)
        return Reader(partner_id=partner_id, sandbox=sandbox)


async def _reader(
    services: ServicesDep,
    now: Now,
    app_key: ServiceApiKey,
    authorization: Annotated[str | None, Header()] = None,
) -> Reader:
    # async, with one thread hop of its own: a sync dependency costs a hop, and the read
    # session as a dependency two more (docs/performance.md, "Reading"). A dependency still,
    # so a caller without a valid key gets 401 before any parameter is checked, as always.
    return await run_in_threadpool(_authenticated_reader, services, now, app_key, authorization)


ReceiptReader = Annotated[Reader, Depends(_reader)]

RECEIPT_BODY_SCHEMA = {
    "requestBody": {
        "required": True,
        "content": {
            "application/json": {
                "schema": {
                    "oneOf": [
                        {"$ref": "#/components/schemas/Receipt"},
                        {"$ref": "#/components/schemas/TokenReceiptRequest"},
                    ]
                }
            }
        },
    }
}

RECEIPT_POST_SCHEMA = {
    **RECEIPT_BODY_SCHEMA,
    # The route reads its headers itself (to answer 401 before 400, as it always has); this is
    # the parameter FastAPI would have described.
    "parameters": [
        {
            "in": "header",
            "name": "idempotency-key",
            "required": False,
            "schema": {
                "anyOf": [{"maxLength": IDEMPOTENCY_KEY_MAX, "type": "string"}, {"type": "null"}],
                "title": "Idempotency-Key",
            },
        }
    ],
}


@router.post(
    "/",
    summary="Create a receipt (card-linking form or token form)",
    openapi_extra=RECEIPT_POST_SCHEMA,
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {
            "model": ReceiptCreated,
            "description": "The receipt was stored (or an unchanged resend was recognised).",
        },
        400: {"description": "Rejected: {error, decription} or a list of them."},
        401: {"description": "Missing or wrong API key."},
        403: {"description": "The key's partner lacks the merchant role."},
        409: {"description": "Idempotency-Key reused with another body."},
        413: {"description": "Body over KUITTI_MAX_BODY_BYTES."},
        415: {"description": "Content type is not JSON."},
    },
)
async def create_receipt(request: Request) -> ORJSONResponse:
    # async, with no dependencies: the checks run on the event loop and the write in the
    # process's one writer thread (kuitti.receipts.ingest), so a post costs no threadpool hops.
    ingest: Ingest = request.app.state.ingest
    headers = request.headers
    status, payload = await ingest.post(
        await request.body(),
        authorization=headers.get("authorization"),
        content_type=headers.get("content-type"),
        idempotency_key=headers.get("idempotency-key"),
    )
    return ORJSONResponse(payload, status_code=status)


@router.get(
    "/",
    summary="List the receipts the caller may read, newest first",
    response_model=None,  # the answer is documented, not re-validated
    responses={200: {"model": ReceiptList}},
)
async def list_receipts(
    reader: ReceiptReader,
    services: ServicesDep,
    since: Annotated[
        datetime | None, Query(description="Only receipts at or after this time.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=readers.MAX_LIST_LIMIT)] = readers.DEFAULT_LIST_LIMIT,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    if since is not None and since.tzinfo is None:
        raise InvalidRequest([ErrorDetail("invalid_value", "since: must carry a UTC offset.")])
    return await run_in_threadpool(_list_page, services, reader, since, limit, cursor)


def _list_page(
    services: Services, reader: Reader, since: datetime | None, limit: int, cursor: str | None
) -> dict[str, Any]:
    with services.db.session(write=False) as session:
        return readers.list_receipts(session, reader, since=since, limit=limit, cursor=cursor)


@router.get(
    "/{receipt_id}/{data_format}/",
    summary="Get a receipt in one format",
    description=(
        "Formats: `service_json` (the document as posted), `service_pdf` (PDF/A-3 with the JSON "
        "embedded; `layout=a4` or `roll`), `finvoice_xml` (Finvoice 3.0, ISO-8859-15), "
        "`finvoice_pdf` (the Finvoice drawn as a Finnish invoice). PDF labels follow `lang` "
        "(fi, sv, en) or else `Accept-Language`. Every answer carries a strong `ETag`; send it "
        "back in `If-None-Match` to get 304 without a body."
    ),
    responses={
        200: {
            "content": {
                "application/json": {},
                "application/pdf": {},
                "application/xml": {},
            }
        },
        304: {"description": "Not modified (If-None-Match matched the ETag)."},
        404: {"description": "No such receipt, or the caller may not see it."},
        409: {"description": "finvoice_unavailable: the poster has no bank account (IBAN)."},
    },
)
async def get_receipt(
    receipt_id: str,
    data_format: str,
    reader: ReceiptReader,
    services: ServicesDep,
    layout: Annotated[
        Layout, Query(description="service_pdf page layout: a4 (default) or roll (80 mm).")
    ] = Layout.A4,
    lang: Annotated[
        str | None, Query(max_length=16, description="PDF language: fi, sv or en.")
    ] = None,
    accept_language: Annotated[str | None, Header(max_length=1000)] = None,
    if_none_match: Annotated[str | None, Header(max_length=2000)] = None,
) -> Response:
    try:
        fmt = DataFormat(data_format)
    except ValueError:
        allowed = ", ".join(DataFormat)
        raise InvalidRequest(
            [ErrorDetail("invalid_value", f"data_format: must be one of {allowed}.")]
        ) from None
    try:
        receipt_uuid = uuid.UUID(receipt_id)
    except ValueError:
        raise NotFound() from None
    locale = as_language(lang).value if lang else negotiate_locale(accept_language).value
    # One thread hop for the database and the rendering (a PDF renders for milliseconds).
    return await run_in_threadpool(
        _receipt_answer, services, reader, receipt_uuid, fmt, layout, locale, if_none_match
    )


def _receipt_answer(
    services: Services,
    reader: Reader,
    receipt_id: uuid.UUID,
    fmt: DataFormat,
    layout: Layout,
    locale: str,
    if_none_match: str | None,
) -> Response:
    with services.db.session(write=False) as session:
        receipt, poster = readers.readable_receipt(session, reader, receipt_id)
        tag = etag(receipt, poster, fmt, layout=layout, locale=locale)
        headers = {
            "ETag": tag,
            # A receipt is personal: browsers may keep it but must revalidate; shared caches never.
            "Cache-Control": "private, no-cache",
            "Vary": "Authorization, SERVICE_APIKEY, Accept-Language",
            "X-Content-Type-Options": "nosniff",
        }
        if if_none_match and _etag_matches(if_none_match, tag):
            return Response(status_code=304, headers=headers)
        rendered = render(
            receipt,
            poster,
            fmt,
            layout=layout,
            locale=locale,
            relations=relations(session, receipt),
        )
    if rendered.media_type == "application/pdf":
        headers["Content-Disposition"] = f'inline; filename="{rendered.filename}"'
    return Response(rendered.content, media_type=rendered.media_type, headers=headers)


def _etag_matches(header: str, tag: str) -> bool:
    candidates = [part.strip() for part in header.split(",")]
    return "*" in candidates or any(c.removeprefix("W/") == tag for c in candidates)
