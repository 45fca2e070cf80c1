"""Endpoints 1–3: create, read and list receipts. Thin: check the caller, call the service."""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from functools import partial
from typing import Any, TypeVar

from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from pydantic import BaseModel, Field, ValidationError
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session
from starlette.concurrency import run_in_threadpool
from starlette.datastructures import Headers
from starlette.types import Receive, Scope, Send

from kuitti import signatures
from kuitti.db import Database
from kuitti.deps import get_services
from kuitti.errors import (
    DatabaseUnavailable,
    ErrorDetail,
    InvalidRequest,
    KuittiError,
    NotFound,
    Unauthorized,
)
from kuitti.i18n import as_language, negotiate_locale
from kuitti.inputs import query_moment
from kuitti.metrics import REPLICA_READS
from kuitti.models import Partner, Receipt
from kuitti.oauth.bearer import reading_connection
from kuitti.partners.keys import READERS, Credentials
from kuitti.posting.ingest import IDEMPOTENCY_KEY_MAX, Ingest
from kuitti.receipts import log, readers
from kuitti.receipts.answers import ReceiptCreated, ReceiptList
from kuitti.receipts.formats import DataFormat, Rendered
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.formats.rendering import FORMATS, cached, etag, render
from kuitti.receipts.readers import ReadableReceipt, Reader
from kuitti.receipts.relations import relations
from kuitti.replicas import LIST_MAX_LAG_SECONDS, ReadReplica, recovery_conflict
from kuitti.responses import ORJSONResponse, error_response
from kuitti.services import Services

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])


def _bearer_reader(services: Services, db: Database, credentials: Credentials) -> Reader:
    """A partner app reading on behalf of one of its users (``SERVICE_APIKEY`` +
    ``Authorization: Bearer``)."""
    if not credentials.app_key:
        raise Unauthorized("User-authorized reading needs the SERVICE_APIKEY header too.")
    token = credentials.bearer
    assert token is not None
    now = services.clock.now()
    with db.session(write=False) as session:
        app, connection = reading_connection(
            session, services.settings, credentials.app_key, token, now=now
        )
        return Reader(partner_id=app.id, user_id=connection.user_id, sandbox=app.sandbox)


async def _reader(services: Services, credentials: Credentials, db: Database) -> Reader:
    """Who reads: a partner by its key, or a partner app on behalf of a user; 401 otherwise.
    Checked on every request, never remembered: a rotated key or a disabled partner is refused
    at once."""
    if credentials.bearer is not None:
        # The token's check reads through a session.
        return await db.run_read(_bearer_reader, services, db, credentials)
    return await readers.key_reader(db, READERS.key_digest(credentials))


async def _decided(
    services: Services, decide: Callable[[Database], Awaitable[T]]
) -> tuple[T, Database]:
    """``decide`` (a read that decides who reads what) on the primary, and where it ran: with a
    read replica, on it while the primary is away and it may (``kuitti/replicas.py``)."""
    if services.replica is None:
        return await decide(services.db), services.db
    return await services.replica.decided(services.db, decide)


async def _checked_reader(services: Services, credentials: Credentials) -> Reader:
    reader, _db = await _decided(services, partial(_reader, services, credentials))
    return reader


async def _readable(
    services: Services, credentials: Credentials, receipt_id: uuid.UUID, db: Database
) -> ReadableReceipt:
    """The receipt, if the caller may read it (401, then 404 as ``readers.readable_receipt``)."""
    if credentials.bearer is not None:
        reader = await _reader(services, credentials, db)
        return await readers.readable_receipt(db, reader, receipt_id)
    # A partner key: its check and the read in one statement.
    digest = READERS.key_digest(credentials)
    return await readers.readable_receipt_by_key(db, digest, receipt_id)


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
    # The handler reads its headers itself (to answer 401 before 400); this is the parameter
    # FastAPI would have described.
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


documented = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])
"""The operations of this module that the front door answers (``kuitti.front``), declared for the
API document only: this router is never included in the app, so it routes nothing."""


@documented.post(
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
def create_receipt() -> None: ...  # no docstring: it would become the operation's description


class ReceiptPost:
    """``POST /api/v1/receipts/`` as a plain ASGI app, behind the app's middleware, which has
    read the whole body already (within its limit). The checks run on the event loop and the
    write in the process's one writer thread (``kuitti.posting.ingest``): no threadpool hop."""

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        ingest: Ingest = scope["app"].state.ingest
        body = bytearray()
        more = True
        while more:
            message = await receive()
            body += message.get("body", b"")
            more = message.get("more_body", False)
        # Read here rather than through Starlette's Request, which costs more CPU per post.
        wanted: dict[bytes, str | None] = dict.fromkeys(_POST_HEADERS)
        for name, value in scope["headers"]:
            if name in wanted and wanted[name] is None:  # the first of a repeated one, as Starlette
                wanted[name] = value.decode("latin-1")
        response: Response
        try:
            status, payload = await ingest.post(
                bytes(body),
                authorization=wanted[b"authorization"],
                content_type=wanted[b"content-type"],
                idempotency_key=wanted[b"idempotency-key"],
            )
            response = ORJSONResponse(payload, status_code=status)
        except KuittiError as exc:
            response = error_response(exc.details(), exc.status_code, exc.headers())
        await response(scope, receive, send)


_POST_HEADERS = (b"authorization", b"content-type", b"idempotency-key")


class _ListQuery(BaseModel):
    since: str | None = Field(
        None,
        description="Only receipts at or after this time: an ISO 8601 date-time with an offset.",
        json_schema_extra={"format": "date-time"},
    )
    limit: int = Field(readers.DEFAULT_LIST_LIMIT, ge=1, le=readers.MAX_LIST_LIMIT)
    cursor: str | None = Field(None, max_length=200)


class _ReadQuery(BaseModel):
    layout: Layout = Field(
        Layout.A4, description="service_pdf page layout: a4 (default) or roll (80 mm)."
    )
    lang: str | None = Field(None, max_length=16, description="PDF language: fi, sv or en.")


class _ReadHeaders(BaseModel):
    accept_language: str | None = Field(None, alias="accept-language", max_length=1000)
    if_none_match: str | None = Field(None, alias="if-none-match", max_length=2000)


Model = TypeVar("Model", bound=BaseModel)
T = TypeVar("T")


def _checked(
    model: type[Model], source: str, values: Mapping[str, str], errors: list[Any]
) -> Model | None:
    """``values`` checked against ``model`` exactly as FastAPI checks declared parameters (the
    same messages, located at ``source``); None, with the errors added, when they fail."""
    wanted = {
        field.alias or name: values[field.alias or name]
        for name, field in model.model_fields.items()
        if (field.alias or name) in values
    }
    try:
        return model.model_validate(wanted)
    except ValidationError as exc:
        errors.extend({**e, "loc": (source, *e["loc"])} for e in exc.errors())
        return None


def _openapi_parameters(model: type[BaseModel], source: str) -> list[dict[str, Any]]:
    """The parameters as FastAPI would have described them, had the route declared them."""
    schema = model.model_json_schema(ref_template="#/components/schemas/{model}")
    parameters = []
    for name, field in model.model_fields.items():
        property_schema = schema["properties"][field.alias or name]
        parameter = {"name": field.alias or name, "in": source, "required": False}
        if field.description:
            parameter["description"] = field.description
        parameters.append({**parameter, "schema": property_schema})
    return parameters


# The read routes check their parameters themselves, after the caller's key or token, so that a
# caller without a valid key gets 401 before any parameter is checked (400); the key check and the
# read then run in one thread hop, and the single read in one statement (docs/performance.md,
# "Reading"). FastAPI describes the parameters from these models, for the docs only.
_LIST_PARAMETERS = {"parameters": _openapi_parameters(_ListQuery, "query")}
_READ_PARAMETERS = {
    "parameters": [
        *_openapi_parameters(_ReadQuery, "query"),
        *_openapi_parameters(_ReadHeaders, "header"),
    ]
}


@router.get(
    "/",
    summary="List the receipts the caller may read, newest first",
    openapi_extra=_LIST_PARAMETERS,
    response_model=None,  # the answer is documented, not re-validated
    responses={200: {"model": ReceiptList}},
)
async def list_receipts(request: Request) -> Response:
    # async, with no dependencies: a partner key's page is one statement, its key check
    # included, read from the event loop (``Database.read_rows_async``) with no thread hop.
    services = get_services(request)
    credentials = Credentials.of(request.headers)
    try:
        asked = _list_request(request.query_params)
    except (KuittiError, RequestValidationError):
        await _checked_reader(services, credentials)  # the caller first: 401 before 400
        raise
    page = None
    if services.replica is not None:
        page = await _page_from_replica(services, services.replica, credentials, asked)
    if page is None:
        page, _db = await _decided(services, partial(_list_page, services, credentials, asked))
    # Serialised straight from the page (the same bytes as through the declared ReceiptList).
    return ORJSONResponse(page)


async def _list_page(
    services: Services, credentials: Credentials, asked: _ListRequest, db: Database
) -> dict[str, Any]:
    """The list page read on ``db`` alone, the rights decided there too."""
    if credentials.bearer is not None:
        reader = await _reader(services, credentials, db)
        return await readers.list_receipts(
            db, reader, since=asked.since, limit=asked.limit, after=asked.after
        )
    digest = READERS.key_digest(credentials)
    return await readers.list_receipts_by_key(
        db, digest, since=asked.since, limit=asked.limit, after=asked.after
    )


async def _page_from_replica(
    services: Services, replica: ReadReplica, credentials: Credentials, asked: _ListRequest
) -> dict[str, Any] | None:
    """The list page from the read replica, its rights checked on the primary; None when the
    primary reads it instead: the replica lags beyond the bound or is away, its page is empty,
    or the primary is away (then the replica decides too, if it may: ``_list_page``)."""
    if replica.primary_away:
        return None
    if await replica.lag() > LIST_MAX_LAG_SECONDS:
        REPLICA_READS.labels("lagging" if replica.available else "away").inc()
        return None
    reader: Reader | str = READERS.key_digest(credentials)
    if credentials.bearer is not None:
        try:
            reader = await _reader(services, credentials, services.db)
        except DatabaseUnavailable:
            replica.primary_went_away()  # the replica decides while it is away (_list_page)
            return None
    try:
        rows = await readers.replica_rows(
            replica.db, reader, since=asked.since, limit=asked.limit, after=asked.after
        )
    except DatabaseUnavailable:
        replica.went_away()
        REPLICA_READS.labels("away").inc()
        return None
    except DBAPIError as error:
        if not recovery_conflict(error):
            raise
        rows = []  # cancelled by the standby's replay: the primary reads the page
    if not rows:
        REPLICA_READS.labels("miss").inc()
        return None
    try:
        page = await readers.checked_page(services.db, reader, rows, asked.limit)
    except DatabaseUnavailable:
        replica.primary_went_away()  # the replica decides while it is away (_list_page)
        return None
    REPLICA_READS.labels("replica").inc()
    return page


@dataclass(frozen=True)
class _ListRequest:
    since: datetime | None
    limit: int
    after: readers.Cursor | None


def _list_request(query: Mapping[str, str]) -> _ListRequest:
    """What a list page asks for; its errors in the order they are answered."""
    errors: list[Any] = []
    params = _checked(_ListQuery, "query", query, errors)
    if params is None:
        raise RequestValidationError(errors)
    since = query_moment("since", params.since) if params.since is not None else None
    after = readers.decode_cursor(params.cursor) if params.cursor is not None else None
    return _ListRequest(since, params.limit, after)


_MEDIA_TYPES = dict.fromkeys(row.media_type.partition(";")[0] for row in FORMATS.values())
# service_json is the document as posted; the other formats are files.
_MEDIA_SCHEMAS: dict[str, dict[str, str]] = {
    "application/json": {"$ref": "#/components/schemas/Receipt"},
    "application/pdf": {"type": "string", "format": "binary"},
}


@router.get(
    "/{receipt_id}/{data_format}/",
    summary="Get a receipt in one format",
    description=(
        "Formats: "
        + ", ".join(f"`{fmt}` ({row.description})" for fmt, row in FORMATS.items())
        + ". PDF labels follow `lang` (fi, sv, en) or else `Accept-Language`. Every answer "
        "carries a strong `ETag`; send it back in `If-None-Match` to get 304 without a body."
    ),
    responses={
        200: {
            "content": {
                media: {"schema": _MEDIA_SCHEMAS.get(media, {"type": "string"})}
                for media in _MEDIA_TYPES
            },
            "headers": {
                signatures.SIGNATURE_HEADER: {
                    "description": "`service_json` only: the receipt's signature, a detached "
                    "JWS (RFC 7515, RFC 7797) over exactly the bytes of the body; the keys are "
                    f"published at `{signatures.JWKS_PATH}`.",
                    "schema": {"type": "string"},
                }
            },
        },
        304: {"description": "Not modified (If-None-Match matched the ETag)."},
        404: {"description": "No such receipt, or the caller may not see it."},
        409: {
            "description": "finvoice_unavailable: the poster has no bank account (IBAN); "
            "receipt_not_signed: `signed_json` of a receipt the backfill has not signed yet."
        },
    },
    openapi_extra=_READ_PARAMETERS,
)
async def get_receipt(request: Request, receipt_id: str, data_format: str) -> Response:
    # async, with no dependencies: the key, the right and the ETag are one read from the event
    # loop (``Database.read_rows_async``), and a cached rendering answers with no thread hop.
    services = get_services(request)
    answer = await _receipt_answer(
        services, request.headers, request.query_params, receipt_id, data_format
    )
    if isinstance(answer, _Unrendered):
        # Not rendered in this process yet: a PDF renders for milliseconds, in a thread.
        return await run_in_threadpool(_rendered_answer, services, answer)
    return answer


@dataclass(frozen=True)
class _ReadRequest:
    receipt_id: uuid.UUID
    fmt: DataFormat
    layout: Layout
    locale: str
    if_none_match: str | None


def _read_request(
    headers: Headers, query: Mapping[str, str], receipt_id: str, data_format: str
) -> _ReadRequest:
    """What a receipt read asks for; its errors in the order they are answered."""
    errors: list[Any] = []
    options = _checked(_ReadQuery, "query", query, errors)
    conditions = _checked(_ReadHeaders, "header", headers, errors)
    if options is None or conditions is None:
        raise RequestValidationError(errors)
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
    if options.lang:
        locale = as_language(options.lang).value
    else:
        locale = negotiate_locale(conditions.accept_language).value
    return _ReadRequest(receipt_uuid, fmt, options.layout, locale, conditions.if_none_match)


@dataclass(frozen=True)
class _Unrendered:
    """A read answered but for its rendering, which this process does not have yet."""

    found: ReadableReceipt
    asked: _ReadRequest
    tag: str
    decided_on: Database
    """Where the rights were decided: the primary, or the replica while the primary is away."""


async def _receipt_answer(
    services: Services,
    headers: Headers,
    query: Mapping[str, str],
    receipt_id: str,
    data_format: str,
) -> Response | _Unrendered:
    credentials = Credentials.of(headers)
    try:
        asked = _read_request(headers, query, receipt_id, data_format)
    except (KuittiError, RequestValidationError):
        await _checked_reader(services, credentials)  # the caller first: 401 before 400 or 404
        raise
    found, decided_on = await _decided(
        services, partial(_readable, services, credentials, asked.receipt_id)
    )
    logged = ""
    if FORMATS[asked.fmt].shows_proof:  # its proof changes once a tree head holds it
        rows = await decided_on.read_rows_async(log.LOG_STATE, {"receipt_id": found.id})
        logged = log.log_state(bool(rows), rows[0][0] if rows else None)
    tag = etag(
        found, found.poster, asked.fmt, layout=asked.layout, locale=asked.locale, logged=logged
    )
    if asked.if_none_match and _etag_matches(asked.if_none_match, tag):
        return Response(status_code=304, headers=_answer_headers(tag))
    rendered = cached(tag)
    if rendered is None:
        return _Unrendered(found, asked, tag, decided_on)
    return _answer(tag, rendered)


def _rendered_answer(services: Services, unrendered: _Unrendered) -> Response:
    """The answer of a read whose rendering this process does not have yet: rendered from the
    stored receipt, its ETag taken again from the rows it renders. With a read replica, from
    the replica when it holds the version the primary decided on (the same ETag); else, a read
    right after its post or its return included, from where the rights were decided."""
    replica = services.replica
    if replica is not None and unrendered.decided_on is services.db:
        answer = replica.read(partial(_rendered_from, unrendered=unrendered, expected=True))
        if answer is not None:
            return answer
    with unrendered.decided_on.session(write=False) as session:
        answer = _rendered_from(session, unrendered, expected=False)
    if answer is None:
        raise NotFound()
    return answer


def _rendered_from(session: Session, unrendered: _Unrendered, *, expected: bool) -> Response | None:
    """The answer rendered from the rows ``session`` reads; None if the receipt is not there,
    or, when the ``expected`` version is wanted, is there in another version."""
    found, asked = unrendered.found, unrendered.asked
    fmt, layout, locale = asked.fmt, asked.layout, asked.locale
    receipt = session.get(Receipt, found.id)
    poster = session.get(Partner, found.poster.id)
    if receipt is None or poster is None:
        return None
    proof = log.inclusion(session, receipt) if FORMATS[fmt].shows_proof else None
    logged = "" if proof is None else proof.state
    tag = etag(receipt, poster, fmt, layout=layout, locale=locale, logged=logged)
    if expected and tag != unrendered.tag:
        return None
    rendered = render(
        receipt,
        poster,
        fmt,
        layout=layout,
        locale=locale,
        relations=relations(session, receipt),
        log=proof,
    )
    return _answer(tag, rendered)


def _answer(tag: str, rendered: Rendered) -> Response:
    headers = _answer_headers(tag)
    if rendered.media_type == "application/pdf":
        headers["Content-Disposition"] = f'inline; filename="{rendered.filename}"'
    elif rendered.media_type == signatures.SIGNED_MEDIA_TYPE:
        headers["Content-Disposition"] = f'attachment; filename="{rendered.filename}"'
    if rendered.signature is not None:
        headers[signatures.SIGNATURE_HEADER] = rendered.signature
    return Response(rendered.content, media_type=rendered.media_type, headers=headers)


def _answer_headers(tag: str) -> dict[str, str]:
    return {
        "ETag": tag,
        # A receipt is personal: browsers may keep it but must revalidate; shared caches never.
        "Cache-Control": "private, no-cache",
        "Vary": "Authorization, SERVICE_APIKEY, Accept-Language",
        "X-Content-Type-Options": "nosniff",
    }


def _etag_matches(header: str, tag: str) -> bool:
    candidates = [part.strip() for part in header.split(",")]
    return "*" in candidates or any(c.removeprefix("W/") == tag for c in candidates)
