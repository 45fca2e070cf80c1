"""Ingesting receipts (reading them: ``kuitti.receipts.readers``).

``create_receipt`` is the one path by which a receipt enters: it runs inside the caller's unit of
work, so the receipt, its links, its deliveries and the outbox rows they cause commit together or
not at all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy.orm import Session

from kuitti import locks
from kuitti.cards.matching import record_card_payments
from kuitti.config import Settings
from kuitti.delivery import links
from kuitti.delivery.tokens import TokenStatus, deliver_tokens
from kuitti.errors import Conflict
from kuitti.models import IdempotencyRecord, Partner, Receipt, ReceiptGrant, ReceiptLink
from kuitti.models.receipts import GrantReason
from kuitti.receipts import returns
from kuitti.receipts.checks import LinkPlan, TokenCheck, check_tokens
from kuitti.receipts.validation import ReceiptRequest, TokenType


@dataclass
class CreatedReceipt:
    receipt_id: uuid.UUID
    receipt_links: list[str]
    tokens: list[TokenStatus]
    receipt_web_url: str
    replayed: bool = False
    original: returns.OriginalOutcome | None = None

    def as_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {
            "receipt_id": str(self.receipt_id),
            "receipt_links": self.receipt_links,
            "tokens": [{"type": t.type.value, "status": t.status} for t in self.tokens],
            "receipt_web_url": self.receipt_web_url,
        }
        if self.original is not None:
            body["original"] = self.original.as_json()
        return body


@dataclass(frozen=True)
class IdempotencyKey:
    key: str
    request_hash: str


def create_receipt(
    session: Session,
    settings: Settings,
    partner: Partner,
    request: ReceiptRequest,
    *,
    now: datetime,
    idempotency: IdempotencyKey | None = None,
) -> tuple[int, dict[str, Any]]:
    """Store a validated receipt, deliver it through its tokens and card-linking.

    Returns the HTTP status and body; a replayed idempotent request returns the first answer.
    """
    if idempotency is not None:
        locks.acquire(session, "idempotency", str(partner.id), idempotency.key)
        record = session.get(IdempotencyRecord, (partner.id, idempotency.key))
        if record is not None:
            if record.request_hash != idempotency.request_hash:
                raise Conflict(
                    "This Idempotency-Key was already used with a different body.",
                    code="idempotency_key_reused",
                )
            return record.status_code, orjson.loads(record.response_body)

    # The same checks as the dry run (POST /api/v1/receipts/validate): see receipts/checks.py.
    checked = check_tokens(session, settings, partner, request, lock=True)
    if checked.resend_of is not None:
        result = _replay(session, settings, checked)
    else:
        result = _store(session, settings, partner, request, checked.plans, now=now)
    body = result.as_json()
    if idempotency is not None:
        session.add(
            IdempotencyRecord(
                partner_id=partner.id,
                key=idempotency.key,
                request_hash=idempotency.request_hash,
                status_code=200,
                response_body=orjson.dumps(body).decode(),
                created_at=now,
            )
        )
    return 200, body


def _replay(session: Session, settings: Settings, checked: TokenCheck) -> CreatedReceipt:
    """A POS resending an unchanged RECEIPT_ID receipt gets the original id back."""
    assert checked.resend_of is not None
    original = session.get(Receipt, checked.resend_of)
    assert original is not None
    return CreatedReceipt(
        receipt_id=original.id,
        receipt_links=[p.url for p in checked.plans],
        tokens=[TokenStatus(TokenType(t["type"]), t["status"]) for t in original.token_statuses],
        receipt_web_url=links.private_link(settings, original.id),
        replayed=True,
        original=returns.stored_outcome(original),
    )


def _store(
    session: Session,
    settings: Settings,
    partner: Partner,
    request: ReceiptRequest,
    plans: list[LinkPlan],
    *,
    now: datetime,
) -> CreatedReceipt:
    doc = request.receipt
    receipt = Receipt(
        id=uuid.uuid4(),
        partner_id=partner.id,
        document=orjson.dumps(request.document).decode(),
        document_hash=request.document_hash,
        receipt_number=doc.receiptNumber,
        receipt_time=doc.receipt_time,
        receipt_timestamp=doc.receiptTimeStamp,
        merchant_name=doc.merchant.name,
        total=doc.totalPriceIncVAT,
        currency=doc.currencyISOCode,
        created_at=now,
        sandbox=partner.sandbox,
    )
    session.add(receipt)
    # A new receipt has no grants yet: the poster's needs no existence check.
    session.add(
        ReceiptGrant(
            partner_id=partner.id,
            receipt_id=receipt.id,
            receipt_time=receipt.receipt_time,
            reason=GrantReason.POSTED,
        )
    )
    session.flush()
    for plan in plans:
        assert plan.token.namespace is not None
        session.add(
            ReceiptLink(
                namespace=plan.token.namespace, identifier=plan.token.value, receipt_id=receipt.id
            )
        )
    original = returns.link_return(session, partner, receipt, doc, now=now)
    statuses = deliver_tokens(session, settings, partner, receipt, doc, request.tokens, now=now)
    receipt.token_statuses = [{"type": t.type.value, "status": t.status} for t in statuses]
    record_card_payments(session, receipt, doc, now=now)
    return CreatedReceipt(
        receipt_id=receipt.id,
        receipt_links=[p.url for p in plans],
        tokens=statuses,
        receipt_web_url=links.private_link(settings, receipt.id),
        original=original,
    )
