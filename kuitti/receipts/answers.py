"""The JSON answers of the receipt operations, as the OpenAPI document describes them.

The routes build their answers directly (``ORJSONResponse``, or the readers' dicts); these
models are the routes' documentation (``responses={200: {"model": …}}``) and what the tests
check real answers against, never a per-request serialisation step.
"""

from __future__ import annotations

from pydantic import BaseModel, Field


class TokenResult(BaseModel):
    type: str
    status: str


class ReceiptCreated(BaseModel):
    """What creating a receipt answers: its id, the links its RECEIPT_ID tokens made, one status
    per token (in order) and the receipt's private web address."""

    receipt_id: str
    receipt_links: list[str]
    tokens: list[TokenResult]
    receipt_web_url: str


class ValidationWarning(BaseModel):
    """An advisory rule's finding: the post would still be accepted."""

    code: str
    path: str
    message: str


class ReceiptValid(BaseModel):
    """The dry run's answer when a post would be accepted (``valid`` is always true: a refused
    body answers 400 with the post's errors)."""

    valid: bool
    warnings: list[ValidationWarning]


class ReceiptSummary(BaseModel):
    receipt_id: str
    merchant_name: str | None
    receipt_time: str
    total: int
    currency: str
    original_receipt_id: str | None = Field(
        None, description="On a return linked to its purchase, if the caller may read it too."
    )
    return_receipt_ids: list[str] | None = Field(
        None, description="On a purchase, its linked returns that the caller may read too."
    )


class ReceiptList(BaseModel):
    """One page, newest first; ``next_cursor`` fetches the next (null on the last page)."""

    receipts: list[ReceiptSummary]
    next_cursor: str | None
