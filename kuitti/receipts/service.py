"""Ingesting receipts (reading them: ``kuitti.receipts.readers``).

``create_receipt`` is the one path by which a receipt enters: it runs inside the caller's unit of
work, so the receipt, its links, its deliveries and the outbox rows they cause commit together or
not at all.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

import orjson
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import locks
from kuitti.cards.matching import record_card_payments
from kuitti.config import Settings
from kuitti.delivery import links
from kuitti.delivery.tokens import TokenStatus, deliver_tokens
from kuitti.errors import Conflict, ErrorDetail, InvalidRequest
from kuitti.models import IdempotencyRecord, Partner, Receipt, ReceiptGrant, ReceiptLink
from kuitti.models.receipts import GrantReason
from kuitti.receipts import returns
from kuitti.receipts.readers import Reader, may_read
from kuitti.receipts.validation import ReceiptRequest, Token, TokenType


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


@dataclass
class _LinkPlan:
    token: Token
    url: str
    existing_receipt: uuid.UUID | None = None
    existing_hash: str | None = field(default=None)


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

    document_hash = request.document_hash
    plans = _plan_links(session, settings, partner, request.tokens)
    existing = {p.existing_receipt for p in plans if p.existing_receipt is not None}
    if existing:
        result = _resend_or_duplicate(session, settings, partner, plans, document_hash)
    else:
        result = _store(session, settings, partner, request, plans, document_hash, now=now)
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


def _plan_links(
    session: Session, settings: Settings, partner: Partner, tokens: list[Token]
) -> list[_LinkPlan]:
    """Check every RECEIPT_ID token (namespace ownership; uniqueness is settled by the caller)."""
    owned = set(partner.namespace_names)
    errors: list[ErrorDetail] = []
    plans: list[_LinkPlan] = []
    for index, token in enumerate(tokens):
        if token.type is not TokenType.RECEIPT_ID:
            continue
        assert token.namespace is not None
        if token.namespace not in owned:
            errors.append(
                ErrorDetail(
                    "unknown_namespace",
                    f"attributes.tokens[{index}].namespace: {token.namespace!r} is not one of "
                    "your namespaces.",
                )
            )
            continue
        # Serialise writers of the same identifier; the primary key is the final guard.
        locks.acquire(session, "receipt-link", token.namespace, token.value)
        plan = _LinkPlan(token, links.namespace_link(settings, token.namespace, token.value))
        link = session.get(ReceiptLink, (token.namespace, token.value))
        if link is not None:
            plan.existing_receipt = link.receipt_id
            plan.existing_hash = session.scalar(
                select(Receipt.document_hash).where(Receipt.id == link.receipt_id)
            )
        plans.append(plan)
    if errors:
        raise InvalidRequest(errors)
    return plans


def _resend_or_duplicate(
    session: Session,
    settings: Settings,
    partner: Partner,
    plans: list[_LinkPlan],
    document_hash: str,
) -> CreatedReceipt:
    """A POS resending an unchanged RECEIPT_ID receipt gets the original id back."""
    originals = {p.existing_receipt for p in plans}
    receipt_id = next(iter(originals)) if len(originals) == 1 else None
    unchanged = (
        receipt_id is not None
        and all(p.existing_hash == document_hash for p in plans)
        and may_read(session, Reader(partner.id), receipt_id)
    )
    if not unchanged:
        errors = [
            ErrorDetail(
                "duplicate_receipt_id",
                f"attributes.tokens: receipt identifier {p.token.value!r} is already used in "
                f"namespace {p.token.namespace!r} by a different receipt.",
            )
            for p in plans
            if p.existing_receipt is not None
        ]
        raise InvalidRequest(errors)
    assert receipt_id is not None
    original = session.get(Receipt, receipt_id)
    assert original is not None
    return CreatedReceipt(
        receipt_id=receipt_id,
        receipt_links=[p.url for p in plans],
        tokens=[TokenStatus(TokenType(t["type"]), t["status"]) for t in original.token_statuses],
        receipt_web_url=links.private_link(settings, receipt_id),
        replayed=True,
        original=returns.stored_outcome(original),
    )


def _store(
    session: Session,
    settings: Settings,
    partner: Partner,
    request: ReceiptRequest,
    plans: list[_LinkPlan],
    document_hash: str,
    *,
    now: datetime,
) -> CreatedReceipt:
    doc = request.receipt
    receipt = Receipt(
        id=uuid.uuid4(),
        partner_id=partner.id,
        document=orjson.dumps(request.document).decode(),
        document_hash=document_hash,
        receipt_number=doc.receiptNumber,
        receipt_time=doc.receipt_time,
        receipt_timestamp=doc.receiptTimeStamp,
        merchant_name=doc.merchant.name,
        total=doc.totalPriceIncVAT,
        currency=doc.currencyISOCode,
        created_at=now,
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
