"""The JSON bodies of the kuitti API, as docs/api.md and the server's ``/openapi.json`` name them.

Answers allow keys this version does not know (the service may add some); the request models
are strict. The receipt document itself stays a plain ``dict``: its full schema is the
``Receipt`` entry of ``/openapi.json``, and the service returns it exactly as posted.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

ReceiptDocument = dict[str, Any]
TokenType = Literal["RECEIPT_ID", "DYNAMIC_QR_CODE", "CARD", "EMAIL", "USER"]
DataFormat = Literal["service_json", "service_pdf", "finvoice_xml", "finvoice_pdf"]


class Answer(BaseModel):
    """An answer from the service: unknown keys are kept, not refused."""

    model_config = ConfigDict(extra="allow", frozen=True)


class Token(BaseModel):
    """One delivery token of the token form: ``value`` (receipt identifier, QR value, masked PAN
    or e-mail address), ``id`` (the ``partner_card_id`` of a ``CARD``), ``namespace`` (for
    ``RECEIPT_ID`` and ``DYNAMIC_QR_CODE``) and ``token`` (a ``USER``'s access token)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: TokenType
    value: str | None = None
    id: str | None = None
    namespace: str | None = None
    token: str | None = None


class TokenAttributes(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[Token]


class TokenReceiptPost(BaseModel):
    """The token form of ``POST /api/v1/receipts/``: the receipt and the tokens that deliver it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    attributes: TokenAttributes
    receipt: ReceiptDocument


class TokenResult(Answer):
    type: str
    status: str  # link_created, delivered, email_queued, unmatched, sandbox


class OriginalLink(Answer):
    """For a return that names its purchase: ``linked``, ``original_not_found`` or
    ``original_ambiguous``, and the purchase's id when linked."""

    status: str
    receipt_id: str | None = None


class ReceiptCreated(Answer):
    receipt_id: str
    receipt_links: list[str]
    tokens: list[TokenResult]
    receipt_web_url: str
    original: OriginalLink | None = None


class ReceiptSummary(Answer):
    """One item of the receipt list; the two relation keys only on linked returns/purchases."""

    receipt_id: str
    merchant_name: str | None
    receipt_time: str
    total: int
    currency: str
    original_receipt_id: str | None = None
    return_receipt_ids: list[str] | None = None


class ReceiptList(Answer):
    """One page, newest first; ``next_cursor`` is null on the last page."""

    receipts: list[ReceiptSummary]
    next_cursor: str | None


class ErrorBody(Answer):
    """The error shape: ``{"error", "decription"}`` (the interface's spelling). The OAuth token
    endpoint adds ``error_description`` with the same text."""

    error: str
    decription: str = ""
    error_description: str | None = None


class AccessToken(Answer):
    token_type: str
    access_token: str
    scope: str
    service_id: str
    expires_in: int


class Revoked(Answer):
    service_id: str
    revoked: bool


class QrCode(Answer):
    value: str
    namespace: str
    expires_at: str


class CardEnrolment(BaseModel):
    """The body of ``POST /api/v1/cards/``: the issuer's own id of the card, its masked number
    (first six and last four digits; a full number is always refused) and its expiry."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    partner_card_id: str
    masked_pan: str
    exp_date: str
    name: str | None = None


class CardTransaction(BaseModel):
    """The body of ``POST /api/v1/card-transactions/``: one payment (``auth`` when authorised,
    ``clearing`` when settled) of an enrolled card, named by ``partner_card_id`` or
    ``service_card_id``. ``amount`` is signed, in fractional units (a refund is negative);
    ``timestamp`` carries its UTC offset."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    transaction_type: Literal["auth", "clearing"]
    amount: int
    currency: str
    timestamp: str
    merchant_id: str
    merchant_name: str
    partner_card_id: str | None = None
    service_card_id: str | None = None
    reference_number: str | None = None
    authorization_code: str | None = None


class Card(Answer):
    """An enrolled card (``name`` only when one was given)."""

    service_card_id: str
    partner_card_id: str
    masked_pan: str
    exp_date: str
    pilot: bool
    name: str | None = None


class CardRemoved(Answer):
    service_card_id: str
    partner_card_id: str
    deleted: bool


class CardTransactionRecorded(Answer):
    """A stored transaction and the purchase it belongs to; ``matched_receipt_id`` once a
    receipt is linked to that purchase; ``replayed`` when the same transaction came again."""

    transaction_id: str
    service_card_id: str
    partner_card_id: str
    purchase_id: str
    matched_receipt_id: str | None
    replayed: bool
