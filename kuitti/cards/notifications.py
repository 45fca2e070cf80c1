"""What a card-linking match tells: the receipt goes to the card's user, the issuer may read it,
and the issuer hears of it (a ``receipt_notification``, or for a pilot bank the whole receipt in
a ``full_receipt_notification``). Written in the matching unit of work; the worker sends them."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import func, select
from sqlalchemy.orm import Session

from kuitti.cards.rules import Fit
from kuitti.clock import iso_utc
from kuitti.config import Settings
from kuitti.delivery.service import deliver_to_user, grant_via_card
from kuitti.links import private_link
from kuitti.models import Card, Partner, Receipt
from kuitti.models.cards import CardMatch, CardPaymentRecord
from kuitti.oauth.service import active_connection
from kuitti.webhooks.events import enqueue
from kuitti.webhooks.payloads import (
    CardReceiptData,
    CardReceiptNotification,
    FullReceiptNotification,
)


def deliver_match(
    session: Session,
    settings: Settings,
    record: CardPaymentRecord,
    chosen: Fit,
    *,
    now: datetime,
) -> None:
    """Deliver the receipt of a matched payment and notify the card's issuer."""
    card = chosen.card
    receipt = session.get(Receipt, record.receipt_id)
    issuer = session.get(Partner, card.partner_id)
    assert receipt is not None
    assert issuer is not None
    if card.user_id is not None:
        deliver_to_user(session, receipt, card.user_id, via="card", now=now)
    grant_via_card(session, receipt, card)
    if card.pilot:
        _full_receipt(session, settings, receipt, issuer, card, now=now)
        return
    payload = CardReceiptNotification(
        partner_card_id=card.partner_card_id,
        service_card_id=card.id,
        data=receipt_notification_data(receipt, record, chosen),
    )
    enqueue(session, issuer, payload, now=now)


def receipt_notification_data(
    receipt: Receipt, record: CardPaymentRecord, chosen: Fit
) -> CardReceiptData:
    """The ``data`` of an issuer's ``receipt_notification``: the codes come from the receipt,
    else from the transaction the payment fitted."""
    txn = chosen.transaction
    return CardReceiptData(
        receipt_id=receipt.id,
        merchant_name=receipt.merchant_name,
        timestamp=iso_utc(record.paid_at),
        amount=str(record.amount),
        merchant_id=record.merchant_id,
        reference_number=record.reference_number or (txn.reference_number if txn else None),
        authorization_code=record.authorization_code or (txn.authorization_code if txn else None),
        transaction_type=txn.transaction_type if txn is not None else "auth",
    )


def _full_receipt(
    session: Session,
    settings: Settings,
    receipt: Receipt,
    bank: Partner,
    card: Card,
    *,
    now: datetime,
) -> None:
    matches_for_bank = session.scalar(
        select(func.count(CardMatch.id))
        .join(Card, Card.id == CardMatch.card_id)
        .where(
            CardMatch.receipt_id == receipt.id,
            Card.partner_id == bank.id,
            Card.pilot.is_(True),
        )
    )
    if matches_for_bank and matches_for_bank > 1:
        return  # split tender on two pilot cards of one bank: one full receipt is enough
    connection = (
        active_connection(session, card.user_id, card.partner_id)
        if card.user_id is not None
        else None
    )
    payload = FullReceiptNotification(
        service_id=connection.id if connection is not None else None,
        receipt_id=receipt.id,
        receipt_json=receipt.document,  # the stored bytes, unchanged
        receipt_web_url=private_link(settings, receipt.id),
    )
    enqueue(session, bank, payload, now=now)
