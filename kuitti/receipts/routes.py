"""Endpoints 1–3: create, read and list receipts. Thin: check the caller, call the service."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Annotated, Any

from fastapi import APIRouter, Header, Query
from fastapi.responses import Response

from kuitti.deps import Now, RawBody, ReadSession, ServicesDep
from kuitti.errors import ErrorDetail, InvalidRequest, NotFound, UnsupportedMediaType
from kuitti.models import Partner
from kuitti.partners.auth import MerchantPartner
from kuitti.receipts import service
from kuitti.receipts.formats import DataFormat, render
from kuitti.receipts.readers import ReceiptReader
from kuitti.receipts.validation import canonical_hash, parse_json, parse_receipt_request
from kuitti.responses import ORJSONResponse

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])

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


@router.post(
    "/",
    summary="Create a receipt (card-linking form or token form)",
    openapi_extra=RECEIPT_BODY_SCHEMA,
    responses={
        200: {"description": "The receipt was stored (or an unchanged resend was recognised)."},
        400: {"description": "Rejected: {error, decription} or a list of them."},
        401: {"description": "Missing or wrong API key."},
        403: {"description": "The key's partner lacks the merchant role."},
        409: {"description": "Idempotency-Key reused with another body."},
        413: {"description": "Body over KUITTI_MAX_BODY_BYTES."},
        415: {"description": "Content type is not JSON."},
    },
)
def create_receipt(
    body: RawBody,
    partner: MerchantPartner,
    services: ServicesDep,
    now: Now,
    content_type: Annotated[str | None, Header()] = None,
    idempotency_key: Annotated[str | None, Header(max_length=255)] = None,
) -> ORJSONResponse:
    if (content_type or "").split(";")[0].strip().lower() != "application/json":
        raise UnsupportedMediaType("Send the receipt as Content-Type: application/json.")
    request = parse_receipt_request(body, attachments_enabled=partner.attachments_enabled)
    idempotency = None
    if idempotency_key:
        idempotency = service.IdempotencyKey(idempotency_key, canonical_hash(parse_json(body)))
    with services.db.session() as session:
        status, payload = service.create_receipt(
            session, services.settings, partner, request, now=now, idempotency=idempotency
        )
    return ORJSONResponse(payload, status_code=status)


@router.get("/", summary="List the receipts the caller may read, newest first")
def list_receipts(
    reader: ReceiptReader,
    session: ReadSession,
    since: Annotated[
        datetime | None, Query(description="Only receipts at or after this time.")
    ] = None,
    limit: Annotated[int, Query(ge=1, le=service.MAX_LIST_LIMIT)] = service.DEFAULT_LIST_LIMIT,
    cursor: Annotated[str | None, Query(max_length=200)] = None,
) -> dict[str, Any]:
    if since is not None and since.tzinfo is None:
        raise InvalidRequest([ErrorDetail("invalid_value", "since: must carry a UTC offset.")])
    return service.list_receipts(session, reader, since=since, limit=limit, cursor=cursor)


@router.get(
    "/{receipt_id}/{data_format}/",
    summary="Get a receipt in one format",
    responses={
        200: {
            "content": {
                "application/json": {},
                "application/pdf": {},
                "application/xml": {},
            }
        },
        404: {"description": "No such receipt, or the caller may not see it."},
    },
)
def get_receipt(
    receipt_id: str, data_format: str, reader: ReceiptReader, session: ReadSession
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
    receipt = service.readable_receipt(session, reader, receipt_uuid)
    poster = session.get(Partner, receipt.partner_id)
    assert poster is not None
    rendered = render(receipt, poster, fmt)
    return Response(rendered.content, media_type=rendered.media_type)
