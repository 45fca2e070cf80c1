"""Enrolling and removing cards, receiving card transactions, and finding the card of a token.

Services never commit: every function runs inside the caller's unit of work, so a card and its
``card_added`` webhook (or a transaction, its notifications and the matches it completes) commit
together or not at all.
"""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import locks, pan
from kuitti.cards.matching import Matcher
from kuitti.cards.rules import CLEARING_AFTER, CLEARING_BEFORE
from kuitti.cards.schemas import CardRequest, TransactionRequest, parse_card_request
from kuitti.clock import iso_utc
from kuitti.config import Settings
from kuitti.delivery.service import reading_connections
from kuitti.errors import Conflict, ErrorDetail, InvalidRequest, NotFound
from kuitti.ids import new_id
from kuitti.metrics import CARD_MATCHING_SECONDS
from kuitti.models import Card, Namespace, Partner
from kuitti.models.cards import CardMatch, CardPurchase, CardTransaction, TransactionType
from kuitti.webhooks.events import enqueue, notify_connection
from kuitti.webhooks.payloads import CardAdded, CardAddedData, TransactionNotification


def check_card_request(
    partner_card_id: object, masked_pan: object, exp_date: object, name: object
) -> CardRequest:
    """Check an enrolment given field by field (the command line); ``InvalidRequest`` lists
    every problem at once."""
    return parse_card_request(
        {
            "partner_card_id": partner_card_id,
            "masked_pan": masked_pan,
            "exp_date": exp_date,
            "name": name,
        }
    )


def card_json(card: Card) -> dict[str, Any]:
    out: dict[str, Any] = {
        "service_card_id": str(card.id),
        "partner_card_id": card.partner_card_id,
        "masked_pan": card.masked_pan,
        "exp_date": iso_utc(card.exp_date),
        "pilot": card.pilot,
    }
    if card.holder_name is not None:
        out["name"] = card.holder_name
    return out


def enroll_card(
    session: Session,
    issuer: Partner,
    request: CardRequest,
    *,
    now: datetime,
    user_id: uuid.UUID | None = None,
    pilot: bool = False,
) -> tuple[Card, bool]:
    """Enrol a card for ``issuer``; returns the card and whether it is new.

    The same ``partner_card_id`` sent again with the same card details returns the enrolled card
    (no second ``card_added``); with other details it is a 409 ``duplicate_partner_card_id``.
    A repeat that carries the holder's token links a card that had no user yet.
    """
    if issuer.sandbox:
        user_id = None  # a test card never has a holder: nothing may reach a person through it
    locks.acquire(session, "card", str(issuer.id), request.partner_card_id)
    existing = session.scalar(
        select(Card).where(
            Card.partner_id == issuer.id,
            Card.partner_card_id == request.partner_card_id,
            Card.deleted_at.is_(None),
        )
    )
    if existing is not None:
        same = (
            existing.masked_pan == request.masked_pan.text
            and existing.exp_date == request.exp_date
            and existing.holder_name == request.name
            and existing.pilot == pilot
            and (user_id is None or existing.user_id in (None, user_id))
        )
        if not same:
            raise Conflict(
                "partner_card_id: this issuer already has an enrolled card with this id and "
                "other details; delete it first to enrol a new one.",
                code="duplicate_partner_card_id",
            )
        if user_id is not None and existing.user_id is None:
            existing.user_id = user_id
        return existing, False
    card = Card(
        id=new_id(),
        partner_id=issuer.id,
        sandbox=issuer.sandbox,
        partner_card_id=request.partner_card_id,
        masked_pan=request.masked_pan.text,
        pan_first6=request.masked_pan.leading,
        pan_last4=request.masked_pan.trailing,
        exp_date=request.exp_date,
        holder_name=request.name,
        user_id=user_id,
        pilot=pilot,
        created_at=now,
    )
    session.add(card)
    session.flush()
    if not pilot:
        # Pilot banks have one webhook (full_receipt_notification); issuers hear of each card.
        _card_added(session, issuer, card, now=now)
    return card, True


def _card_added(session: Session, issuer: Partner, card: Card, *, now: datetime) -> None:
    data = CardAddedData(
        name=card.holder_name, masked_pan=card.masked_pan, exp_date=iso_utc(card.exp_date)
    )
    payload = CardAdded(partner_card_id=card.partner_card_id, service_card_id=card.id, data=data)
    enqueue(session, issuer, payload, now=now)


def delete_card(session: Session, issuer: Partner, service_card_id: str, *, now: datetime) -> Card:
    """Remove an issuer's card: it never matches again (past deliveries stay)."""
    card = issuer_card(session, issuer, service_card_id=service_card_id)
    card.deleted_at = now
    return card


def issuer_card(
    session: Session,
    issuer: Partner,
    *,
    service_card_id: str | None = None,
    partner_card_id: str | None = None,
) -> Card:
    """One of the issuer's enrolled cards, by either id; 404 for anything else."""
    query = select(Card).where(Card.partner_id == issuer.id, Card.deleted_at.is_(None))
    if service_card_id is not None:
        try:
            query = query.where(Card.id == uuid.UUID(service_card_id))
        except ValueError:
            raise NotFound("No such card.") from None
    elif partner_card_id is not None:
        query = query.where(Card.partner_card_id == partner_card_id)
    else:
        raise NotFound("No such card.")
    card = session.scalar(query)
    if card is None:
        raise NotFound("No such card.")
    return card


def card_for_token(
    session: Session,
    partner_card_id: str,
    masked_pan: str,
    namespace: str | None,
    *,
    sandbox: bool,
) -> Card | None:
    """The card a ``CARD`` token names (docs/delivery.md), or None (the token is ``unmatched``).

    ``namespace`` names the issuer by one of its namespaces; without it the ``partner_card_id``
    must be unique across issuers. The token's masked PAN must show at least the last four digits
    and agree with the card's on every digit both show. Deleted cards never match, nor do the
    cards of the other kind (``sandbox``: a test receipt's token names only test cards).
    """
    shown = pan.parse_shown(masked_pan)
    if shown is None or shown.last4 is None:
        return None
    query = select(Card).where(
        Card.partner_card_id == partner_card_id,
        Card.deleted_at.is_(None),
        Card.sandbox.is_(sandbox),
    )
    if namespace is not None:
        issuer_id = session.scalar(select(Namespace.partner_id).where(Namespace.name == namespace))
        if issuer_id is None:
            return None
        query = query.where(Card.partner_id == issuer_id)
    cards = list(session.scalars(query.limit(2)))
    if len(cards) != 1:
        return None
    card = cards[0]
    if not pan.agree(pan.of_card(card.masked_pan, card.pan_first6, card.pan_last4), shown):
        return None
    return card


# -- card transactions -----------------------------------------------------------------------


def record_transaction(
    session: Session,
    settings: Settings,
    issuer: Partner,
    request: TransactionRequest,
    *,
    now: datetime,
) -> dict[str, Any]:
    """Store an issuer's transaction as part of a purchase, announce a new purchase to the card
    user's reading apps, and decide every waiting receipt payment it could fit."""
    card = issuer_card(
        session,
        issuer,
        service_card_id=request.service_card_id,
        partner_card_id=None if request.service_card_id else request.partner_card_id,
    )
    if request.service_card_id and request.partner_card_id not in (None, card.partner_card_id):
        raise InvalidRequest(
            [ErrorDetail("invalid_value", "partner_card_id: is not the id of that card.")]
        )
    locks.acquire(session, "match", request.merchant_id)
    txn = _duplicate(session, card, request)
    if txn is not None:
        return _transaction_json(session, card, txn, replayed=True)
    purchase = _purchase_for(session, card, request, now=now)
    new_purchase = purchase.id is None
    if new_purchase:
        purchase.id = new_id()
        session.add(purchase)
    purchase.authorization_code = purchase.authorization_code or request.authorization_code
    purchase.reference_number = purchase.reference_number or request.reference_number
    txn = CardTransaction(
        id=new_id(),
        card_id=card.id,
        purchase_id=purchase.id,
        transaction_type=request.transaction_type.value,
        amount=request.amount,
        currency=request.currency,
        occurred_at=request.occurred_at,
        merchant_id=request.merchant_id,
        merchant_name=request.merchant_name,
        reference_number=request.reference_number,
        authorization_code=request.authorization_code,
        pan_last4=card.pan_last4,
        created_at=now,
    )
    session.add(txn)
    session.flush()
    with CARD_MATCHING_SECONDS.labels("transaction").time():
        matcher = Matcher(session, settings, now)
        matcher.on_transaction(txn)
        matcher.settle_due(request.merchant_id)
    if new_purchase and card.user_id is not None:
        receipt_id = session.scalar(
            select(CardMatch.receipt_id).where(CardMatch.purchase_id == purchase.id)
        )
        for connection in reading_connections(session, card.user_id):
            payload = TransactionNotification.about(
                connection, receipt_id=receipt_id, merchant_name=request.merchant_name
            )
            notify_connection(session, connection, payload, now=now)
    return _transaction_json(session, card, txn, replayed=False)


def _transaction_json(
    session: Session, card: Card, txn: CardTransaction, *, replayed: bool
) -> dict[str, Any]:
    receipt_id = session.scalar(
        select(CardMatch.receipt_id).where(CardMatch.purchase_id == txn.purchase_id)
    )
    return {
        "transaction_id": str(txn.id),
        "service_card_id": str(card.id),
        "partner_card_id": card.partner_card_id,
        "purchase_id": str(txn.purchase_id),
        "matched_receipt_id": str(receipt_id) if receipt_id is not None else None,
        "replayed": replayed,
    }


def _duplicate(session: Session, card: Card, request: TransactionRequest) -> CardTransaction | None:
    """The same transaction reported again (a retry) is stored once."""
    return session.scalar(
        select(CardTransaction).where(
            CardTransaction.card_id == card.id,
            CardTransaction.merchant_id == request.merchant_id,
            CardTransaction.occurred_at == request.occurred_at,
            CardTransaction.transaction_type == request.transaction_type.value,
            CardTransaction.amount == request.amount,
            _equal_or_null(CardTransaction.authorization_code, request.authorization_code),
            _equal_or_null(CardTransaction.reference_number, request.reference_number),
        )
    )


def _equal_or_null(column: Any, value: str | None) -> Any:
    return column.is_(None) if value is None else column == value


def _purchase_for(
    session: Session, card: Card, request: TransactionRequest, *, now: datetime
) -> CardPurchase:
    """The purchase a transaction belongs to: a clearing joins the auth of the same card and
    merchant id that it continues, else (and for every auth) a new purchase (id None).

    A clearing continues an auth of the same sign, 15 min before to 7 days after it, that has
    no clearing yet and whose codes do not differ from the clearing's. Among several, an equal
    authorization code or reference number decides (earliest first), then an equal amount
    (earliest first), then the only one."""
    fresh = CardPurchase(
        id=None,
        card_id=card.id,
        merchant_id=request.merchant_id,
        merchant_name=request.merchant_name,
        authorization_code=request.authorization_code,
        reference_number=request.reference_number,
        created_at=now,
    )
    if request.transaction_type is TransactionType.AUTH:
        return fresh
    auths = session.execute(
        select(CardTransaction, CardPurchase)
        .join(CardPurchase, CardPurchase.id == CardTransaction.purchase_id)
        .where(
            CardTransaction.card_id == card.id,
            CardTransaction.merchant_id == request.merchant_id,
            CardTransaction.occurred_at >= request.occurred_at - CLEARING_AFTER,
            CardTransaction.occurred_at <= request.occurred_at + CLEARING_BEFORE,
            CardTransaction.transaction_type == TransactionType.AUTH.value,
        )
        .order_by(CardTransaction.occurred_at)
    ).all()
    open_auths: list[tuple[CardTransaction, CardPurchase]] = []
    for auth, purchase in auths:
        if (auth.amount < 0) != (request.amount < 0):
            continue
        if _differs(purchase.authorization_code, request.authorization_code) or _differs(
            purchase.reference_number, request.reference_number
        ):
            continue
        cleared = session.scalar(
            select(CardTransaction.id).where(
                CardTransaction.purchase_id == purchase.id,
                CardTransaction.transaction_type == TransactionType.CLEARING.value,
            )
        )
        if cleared is None:
            open_auths.append((auth, purchase))
    coded = [
        p
        for a, p in open_auths
        if _same(p.authorization_code, request.authorization_code)
        or _same(p.reference_number, request.reference_number)
    ]
    if coded:
        return coded[0]
    same_amount = [p for a, p in open_auths if a.amount == request.amount]
    if same_amount:
        # Several open auths of this card, merchant and amount (a daily regular's coffee): the
        # clearing continues one of them, and which one changes nobody's receipt. Joining none
        # would leave a phantom second purchase that a stranger's receipt with a colliding
        # masked PAN could take.
        return same_amount[0]
    if len(open_auths) == 1:
        return open_auths[0][1]
    return fresh


def _differs(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a != b


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and a == b
