"""Why each CARD payment of a receipt matched, or why it waits (``kuitti receipts explain``)."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.cards.rules import MATCHING_SET_LIFETIME
from kuitti.clock import iso_utc
from kuitti.models.cards import CardMatch, CardPaymentRecord, PaymentStatus


def explain_receipt(session: Session, receipt_id: uuid.UUID, now: datetime) -> dict[str, Any]:
    """Each CARD payment's keys, status and reason, and for a match the fit that decided it."""
    records = session.scalars(
        select(CardPaymentRecord)
        .where(CardPaymentRecord.receipt_id == receipt_id)
        .order_by(CardPaymentRecord.payment_index)
    ).all()
    payments = []
    for record in records:
        status = record.status
        if status == PaymentStatus.WAITING and record.paid_at < now - MATCHING_SET_LIFETIME:
            status = PaymentStatus.EXPIRED.value
        item: dict[str, Any] = {
            "payment_index": record.payment_index,
            "status": status,
            "merchant_id": record.merchant_id,
            "amount": record.amount,
            "pre_authorized_amount": record.pre_authorized_amount,
            "currency": record.currency,
            "paid_at": iso_utc(record.paid_at),
            "masked_pan": record.masked_pan,
            "authorization_code": record.authorization_code,
            "reference_number": record.reference_number,
            "reason": record.reason,
        }
        match = session.scalar(select(CardMatch).where(CardMatch.payment_id == record.id))
        if match is not None:
            item["match"] = {"matched_at": iso_utc(match.matched_at), **match.explanation}
        payments.append(item)
    return {"receipt_id": str(receipt_id), "card_payments": payments}
