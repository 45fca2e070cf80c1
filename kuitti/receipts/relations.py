"""A receipt's relations as the renderings show them: a return's original, a purchase's returns
(linked at ingest by ``kuitti.posting.returns``)."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.models import Receipt


@dataclass(frozen=True)
class RelatedReceipt:
    receipt_id: uuid.UUID
    number: str
    timestamp: str  # receiptTimeStamp as posted (its own offset)

    @property
    def moment(self) -> datetime:
        return datetime.fromisoformat(self.timestamp)


@dataclass(frozen=True)
class Relations:
    """A return's original, and a purchase's returns (oldest first)."""

    original: RelatedReceipt | None = None
    returns: tuple[RelatedReceipt, ...] = ()


NO_RELATIONS = Relations()


class Related(Protocol):
    """What a receipt row says about its relations: a ``Receipt``, or a read's summary of one."""

    @property
    def original_receipt_id(self) -> uuid.UUID | None: ...

    @property
    def return_count(self) -> int: ...


def relations_key(receipt: Related) -> str:
    """Changes whenever ``relations(receipt)`` does, read from the row alone (for ETags and
    rendering caches): a return's original is fixed, and a purchase only gains returns."""
    if receipt.original_receipt_id is None and not receipt.return_count:
        return ""
    return f"{receipt.original_receipt_id or ''}+{receipt.return_count}"


def relations(session: Session, receipt: Receipt) -> Relations:
    """The receipt's relations; no query for a receipt that has none (nearly all)."""
    if receipt.original_receipt_id is None and not receipt.return_count:
        return NO_RELATIONS
    original = None
    if receipt.original_receipt_id is not None:
        original = _related(session.get(Receipt, receipt.original_receipt_id))
    returns: tuple[RelatedReceipt, ...] = ()
    if receipt.return_count:
        rows = session.scalars(
            select(Receipt)
            .where(Receipt.original_receipt_id == receipt.id)
            .order_by(Receipt.receipt_time, Receipt.id)
        )
        returns = tuple(r for row in rows if (r := _related(row)) is not None)
    return Relations(original, returns)


def relations_json(found: Relations) -> dict[str, Any]:
    """The relations as ``kuitti receipts explain --json`` prints them."""

    def one(related: RelatedReceipt) -> dict[str, str]:
        return {
            "receipt_id": str(related.receipt_id),
            "receipt_number": related.number,
            "receipt_time": related.timestamp,
        }

    return {
        "original": one(found.original) if found.original is not None else None,
        "returns": [one(r) for r in found.returns],
    }


def _related(row: Receipt | None) -> RelatedReceipt | None:
    if row is None:
        return None
    return RelatedReceipt(row.id, row.receipt_number, row.receipt_timestamp)
