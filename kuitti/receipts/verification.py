"""Signatures for anyone: the published receipt-signing keys (a JWKS at ``JWKS_PATH``) and the
public ``/verify`` page, where a person uploads or pastes a saved receipt (``signed_json``) or
opens the short URL of a receipt PDF's QR code, and sees whether it is genuine
(``kuitti.signatures``; docs/signing.md)."""

from __future__ import annotations

import uuid
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from starlette.datastructures import UploadFile
from starlette.formparsers import MultiPartException

from kuitti import signatures
from kuitti.deps import ServicesDep
from kuitti.errors import NotFound
from kuitti.i18n import LANGUAGES, Language, negotiate_locale, translate
from kuitti.models import Receipt
from kuitti.receipts import log
from kuitti.responses import ORJSONResponse
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.web import CSRF_FIELD, check_csrf, render

router = APIRouter(tags=["signatures"])

VERIFY_PATH = signatures.VERIFY_PATH
SAVED_MAX_BYTES = 2 * 1024 * 1024  # a saved receipt: the largest post and its signature


def published_keys(services: Services) -> dict[str, Any]:
    """The JWKS; a first key is made if there is none, so it can be cached before it signs."""
    now = services.clock.now()
    with services.db.session(write=False) as session:
        body = signatures.jwks(session, now=now)
    if not body["keys"]:
        with services.db.session() as session:
            box = SecretBox(services.settings.resolved_secret_key)
            signatures.current_key(session, box, now=now)
            body = signatures.jwks(session, now=now)
    return body


@router.get(signatures.JWKS_PATH, summary="Receipt-signing keys (JWKS)")
def receipt_signing_keys(services: ServicesDep) -> ORJSONResponse:
    return ORJSONResponse(
        published_keys(services), headers={"Cache-Control": "public, max-age=3600"}
    )


def _language(request: Request) -> Language:
    lang = request.query_params.get("lang", "").strip().lower()
    for language in LANGUAGES:
        if lang == language.value:
            return language
    return negotiate_locale(request.headers.get("accept-language"))


def _page(
    request: Request, language: Language, result: dict[str, Any] | None, status: int = 200
) -> Response:
    texts = {key: translate(f"verify.{key}", language) for key in _TEXT_KEYS}
    return render(
        request,
        "receipts/verify.html",
        {"lang": language.value, "t": texts, "result": result, "csrf_field": CSRF_FIELD},
        status_code=status,
    )


_TEXT_KEYS = (
    "title",
    "intro",
    "file",
    "paste",
    "submit",
    "valid",
    "tampered",
    "unknown_key",
    "malformed",
    "signed_by",
    "receipt",
    "key",
    "retired",
    "stored",
    "not_found",
    "in_log",
    "log_pending",
)


@router.get(VERIFY_PATH, include_in_schema=False)
def verify_page(request: Request, services: ServicesDep) -> Response:
    """The form; with ``r`` (a receipt id) and ``h`` (its fingerprint), as a receipt PDF's QR
    code links, whether kuitti signed and holds that receipt."""
    language = _language(request)
    receipt_id, short = request.query_params.get("r"), request.query_params.get("h")
    if not receipt_id or not short:
        return _page(request, language, None)
    try:
        wanted = uuid.UUID(receipt_id)
    except ValueError:
        return _page(request, language, {"status": "not_found"}, 404)
    keys = published_keys(services)
    with services.db.session(write=False) as session:
        receipt = session.get(Receipt, wanted)
        document = receipt.document.encode() if receipt is not None else b""
        signature = receipt.signature if receipt is not None else None
        proof = log.inclusion(session, receipt) if receipt is not None else None
    if signature is None or signatures.fingerprint(document) != short:
        return _page(request, language, {"status": "not_found"}, 404)
    saved = signatures.signed_document(document, signature, proof.member if proof else None)
    return _page(request, language, {**log.check_saved(saved, keys), "stored": True})


@router.post(VERIFY_PATH, include_in_schema=False)
async def verify_upload(request: Request, services: ServicesDep) -> Response:
    """A saved receipt, uploaded (``file``) or pasted (``saved``), checked against the keys."""
    language = _language(request)
    try:
        async with request.form(max_files=1, max_fields=3, max_part_size=SAVED_MAX_BYTES) as form:
            csrf = form.get(CSRF_FIELD)
            check_csrf(request, csrf if isinstance(csrf, str) else None)
            upload, pasted = form.get("file"), form.get("saved")
            saved = b""
            if isinstance(upload, UploadFile):
                saved = await upload.read(SAVED_MAX_BYTES + 1)
            if not saved and isinstance(pasted, str):
                saved = pasted.encode()
    except MultiPartException:
        return _page(request, language, {"status": signatures.MALFORMED}, 413)
    if len(saved) > SAVED_MAX_BYTES:
        return _page(request, language, {"status": signatures.MALFORMED}, 413)
    keys = published_keys(services)
    result = log.check_saved(saved, keys)
    return _page(request, language, result, 200 if result["valid"] else 422)


@router.get(
    f"{log.HEADS_PATH}/{{seq}}",
    summary="A signed tree head of the receipt log",
    responses={404: {"description": "No such tree head (yet)."}},
)
def receipt_log_head(seq: str, services: ServicesDep) -> ORJSONResponse:
    """The tree head ``seq`` (1, 2, …) or ``latest``: its claims and its JWS, which anyone may
    keep a copy of. A head never changes once published."""
    number = None if seq == log.LATEST else _head_number(seq)
    with services.db.session(write=False) as session:
        head = log.published_head(session, number)
    if head is None:
        raise NotFound()
    cache = "public, max-age=60" if number is None else "public, max-age=31536000, immutable"
    return ORJSONResponse(head, headers={"Cache-Control": cache})


def _head_number(seq: str) -> int:
    if not seq.isdigit() or len(seq) > 12:
        raise NotFound()
    return int(seq)
