"""``POST /api/v1/receipts/validate``: the receipt post's checks without the post.

The same body, key, content type and size limit as creating a receipt, and the same checks
(``kuitti.posting.checks``, which the post itself calls), so a body this refuses the post
refuses with the same status and errors, and a body this accepts the post stores. It reads
the database (namespace ownership, RECEIPT_ID use) and writes nothing: no receipt, no link, no
idempotency record, no e-mail, no webhook; it takes no lock.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Header

from kuitti.deps import RawBody, ReadSession, ServicesDep
from kuitti.partners.auth import MerchantPartner
from kuitti.partners.keys import require_json
from kuitti.posting.checks import dry_run
from kuitti.receipts.answers import ReceiptValid
from kuitti.receipts.routes import RECEIPT_BODY_SCHEMA
from kuitti.responses import ORJSONResponse

router = APIRouter(prefix="/api/v1/receipts", tags=["receipts"])


@router.post(
    "/validate",
    summary="Check a receipt as creating it would, without storing or sending anything",
    openapi_extra=RECEIPT_BODY_SCHEMA,
    response_model=None,  # the answer is documented, not re-validated
    responses={
        200: {
            "model": ReceiptValid,
            "description": "The post would be accepted; warnings list likely mistakes.",
        },
        400: {"description": "The post would be refused with exactly these errors."},
        401: {"description": "Missing or wrong API key."},
        403: {"description": "The key's partner lacks the merchant role."},
        413: {"description": "Body over KUITTI_MAX_BODY_BYTES."},
        415: {"description": "Content type is not JSON."},
    },
)
def validate_receipt(
    body: RawBody,
    partner: MerchantPartner,
    services: ServicesDep,
    session: ReadSession,
    content_type: Annotated[str | None, Header()] = None,
) -> ORJSONResponse:
    require_json(content_type)
    warnings = dry_run(body, partner, services.settings, session)
    return ORJSONResponse({"valid": True, "warnings": [w.as_json() for w in warnings]})
