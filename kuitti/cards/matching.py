"""Card-linking: matching a receipt's CARD payments to enrolled cards' transactions."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from kuitti.config import Settings
from kuitti.models import Receipt
from kuitti.receipts.schema import Receipt as ReceiptDocument


def match_receipt(
    session: Session,
    settings: Settings,
    receipt: Receipt,
    document: ReceiptDocument,
    *,
    now: datetime,
) -> None:
    """Record the receipt's CARD payments for matching and deliver any that match already."""
    return
