"""Returns linked to the purchase they return (docs/api.md, "Returns and refunds").

A return (a RETURN or PURCHASE_AND_RETURN receipt, or one with a negative row) may name its
original by ``originalReceiptId`` or by ``originalReceipt`` (number, time, branch). At ingest,
``find_original`` looks the original up among the receipts the same merchant posted — the same
partner and the same ``merchant.companyID`` — and, when it finds exactly one, the return is
stored linked to it; ``follow_original`` then gives the return to everyone the purchase reached:
its users (and through them their apps' connections) and the issuers of the cards it matched.
Whoever the purchase reaches later gets its returns too (``kuitti.delivery.service``). A receipt
of another merchant is never linked, and the answer is then the same as for one that does not
exist.

What the renderings show of the relation is read by ``kuitti.receipts.relations``.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum
from typing import Any

import orjson
from sqlalchemy import ColumnElement, and_, select
from sqlalchemy.orm import Session

from kuitti.delivery.service import deliver_to_user, grant_via_card
from kuitti.models import Card, Partner, Receipt, ReceiptDelivery, ReceiptGrant
from kuitti.models.receipts import GrantReason
from kuitti.receipts.schema import Receipt as ReceiptDocument


class OriginalStatus(StrEnum):
    LINKED = "linked"
    NOT_FOUND = "original_not_found"
    AMBIGUOUS = "original_ambiguous"


@dataclass(frozen=True)
class OriginalOutcome:
    """What the create-receipt answer says about a named original (its ``original`` member)."""

    status: OriginalStatus
    receipt_id: uuid.UUID | None = None

    def as_json(self) -> dict[str, str]:
        body = {"status": self.status.value}
        if self.receipt_id is not None:
            body["receipt_id"] = str(self.receipt_id)
        return body


@dataclass(frozen=True)
class FoundOriginal:
    """What ``find_original`` found: the answer's outcome, and the original when linked."""

    outcome: OriginalOutcome
    original: Receipt | None = None


def find_original(session: Session, partner: Partner, document: ReceiptDocument) -> FoundOriginal:
    """The original a return being ingested names (``document.names_original``), locked; read
    before the return is stored, so that its row is inserted with its ``original_receipt_id``
    (``follow_original`` then does the rest once it is stored)."""
    candidates = _candidates(session, partner, document)
    if len(candidates) != 1:
        status = OriginalStatus.AMBIGUOUS if candidates else OriginalStatus.NOT_FOUND
        return FoundOriginal(OriginalOutcome(status))
    original = candidates[0]
    return FoundOriginal(OriginalOutcome(OriginalStatus.LINKED, original.id), original)


def follow_original(
    session: Session, receipt: Receipt, original: Receipt, *, now: datetime
) -> None:
    """Count the stored return ``receipt`` among its ``original``'s returns, and give it to
    everyone the original reached. Runs in ingest's unit of work, before the receipt's own
    tokens are delivered (so their notifications carry the relation too)."""
    original.return_count += 1
    deliveries = session.scalars(
        select(ReceiptDelivery.user_id)
        .where(ReceiptDelivery.receipt_id == original.id)
        .order_by(ReceiptDelivery.created_at, ReceiptDelivery.user_id)
    ).all()
    for user_id in deliveries:
        deliver_to_user(session, receipt, user_id, via="return", now=now, follow_returns=False)
    for card in _granting_cards(session, original):
        grant_via_card(session, receipt, card, follow_returns=False)


def stored_outcome(receipt: Receipt) -> OriginalOutcome | None:
    """The outcome reported again for a resend of a stored receipt."""
    if receipt.original_receipt_id is not None:
        return OriginalOutcome(OriginalStatus.LINKED, receipt.original_receipt_id)
    document = orjson.loads(receipt.document)
    if "originalReceiptId" in document or "originalReceipt" in document:
        return OriginalOutcome(OriginalStatus.NOT_FOUND)
    return None


def _candidates(session: Session, partner: Partner, document: ReceiptDocument) -> list[Receipt]:
    """The poster's own receipts that match the reference, locked for update (a concurrent
    delivery of the original then waits for this link, or this link sees it)."""
    query = select(Receipt).where(Receipt.partner_id == partner.id)
    branch_id: str | None = None
    if document.originalReceiptId is not None:
        query = query.where(Receipt.id == uuid.UUID(document.originalReceiptId))
    else:
        named = document.originalReceipt
        assert named is not None
        moment = datetime.fromisoformat(named.receiptTimeStamp)
        query = query.where(numbered(partner.id, named.receiptNumber, moment))
        branch_id = named.branchId
    rows = session.scalars(query.with_for_update(key_share=True)).all()
    return [
        row
        for row in rows
        if _same_merchant(orjson.loads(row.document), document.merchant.companyID, branch_id)
    ]


def numbered(partner_id: uuid.UUID, number: str, moment: datetime) -> ColumnElement[bool]:
    """The partner's receipts of this number and time, found through its ``posted`` grants,
    whose listing index leads with the partner and the time: a return naming its purchase is
    rare, and an index of the receipts by number for it cost every receipt about 100 bytes
    (migration 0010)."""
    return and_(
        Receipt.id.in_(
            select(ReceiptGrant.receipt_id).where(
                ReceiptGrant.partner_id == partner_id,
                ReceiptGrant.receipt_time == moment,
                ReceiptGrant.reason == GrantReason.POSTED,
            )
        ),
        Receipt.receipt_number == number,
        Receipt.receipt_time == moment,
    )


def _same_merchant(original: dict[str, Any], company_id: str, branch_id: str | None) -> bool:
    merchant = original.get("merchant") or {}
    if merchant.get("companyID") != company_id:
        return False
    return branch_id is None or (merchant.get("branch") or {}).get("id") == branch_id


def _granting_cards(session: Session, original: Receipt) -> list[Card]:
    """The cards through which an issuer may still read the original."""
    return list(
        session.scalars(
            select(Card)
            .join(ReceiptGrant, ReceiptGrant.card_id == Card.id)
            .where(
                ReceiptGrant.receipt_id == original.id,
                ReceiptGrant.reason == GrantReason.CARD,
                Card.deleted_at.is_(None),
                Card.user_id.is_not_distinct_from(ReceiptGrant.card_user_id),
            )
            .order_by(ReceiptGrant.id)
        )
    )
