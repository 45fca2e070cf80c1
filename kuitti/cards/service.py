"""Enrolling and removing cards, receiving card transactions, and finding the card of a token.

Services never commit: every function runs inside the caller's unit of work, so a card and its
``card_added`` webhook (or a transaction, its notifications and the matches it completes) commit
together or not at all.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti import locks
from kuitti.cards import pan
from kuitti.cards.matching import Matcher
from kuitti.cards.rules import CLEARING_AFTER, CLEARING_BEFORE
from kuitti.config import Settings
from kuitti.delivery.service import reading_connections
from kuitti.errors import Conflict, ErrorDetail, InvalidRequest, NotFound
from kuitti.metrics import CARD_MATCHING_SECONDS
from kuitti.models import Card, Namespace, Partner
from kuitti.models.cards import CardMatch, CardPurchase, CardTransaction, TransactionType
from kuitti.receipts.schema import ISO_4217_CODES
from kuitti.webhooks.events import enqueue, notify_connection
from kuitti.webhooks.payloads import CardAdded, CardAddedData, TransactionNotification

PARTNER_CARD_ID_MAX = 200
HOLDER_NAME_MAX = 200
_MONTH_RE = re.compile(r"^(\d{4})-(\d{2})$")


class CardInputError(ValueError):
    """A value a card cannot be enrolled with (the message names the field, never a PAN)."""

    def __init__(self, field: str, message: str, code: str = "invalid_value") -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.code = code


@dataclass(frozen=True)
class CardRequest:
    """A checked enrolment: ``masked_pan`` normalised, ``exp_date`` in UTC."""

    partner_card_id: str
    masked_pan: pan.MaskedPan
    exp_date: datetime
    name: str | None


def parse_exp_date(value: str) -> datetime:
    """``YYYY-MM`` (the end of that month) or an ISO 8601 date-time with an offset, as UTC."""
    month = _MONTH_RE.match(value)
    if month is not None:
        year, mon = int(month.group(1)), int(month.group(2))
        if not 1 <= mon <= 12 or year < 2000:
            raise ValueError("not a valid month")
        first_of_next = datetime(year + mon // 12, mon % 12 + 1, 1, tzinfo=UTC)
        return first_of_next - timedelta(seconds=1)
    try:
        moment = datetime.fromisoformat(value)
    except ValueError:
        raise ValueError("must be an ISO 8601 date-time such as 2028-12-31T23:59:59Z") from None
    if moment.tzinfo is None or "T" not in value.upper():
        raise ValueError("must be an ISO 8601 date-time with an offset, e.g. 2028-12-31T23:59:59Z")
    return moment.astimezone(UTC)


def iso_utc(moment: datetime) -> str:
    """``2028-12-31T23:59:59Z`` (whole seconds; fractions kept when present)."""
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


def check_card_request(
    partner_card_id: object, masked_pan: object, exp_date: object, name: object
) -> CardRequest:
    """Check an enrolment's fields; ``InvalidRequest`` lists every problem at once."""
    errors: list[ErrorDetail] = []
    checked_pan: pan.MaskedPan | None = None
    checked_exp: datetime | None = None

    def need_text(field: str, value: object, limit: int) -> str | None:
        if value is None:
            errors.append(ErrorDetail("missing_field", f"{field}: this field is required."))
            return None
        if not isinstance(value, str):
            errors.append(ErrorDetail("invalid_type", f"{field}: must be a string."))
            return None
        if not value.strip() or len(value) > limit:
            errors.append(
                ErrorDetail("invalid_value", f"{field}: 1 to {limit} characters, not blank.")
            )
            return None
        return value

    card_id = need_text("partner_card_id", partner_card_id, PARTNER_CARD_ID_MAX)
    pan_text = need_text("masked_pan", masked_pan, 64)
    if pan_text is not None:
        try:
            checked_pan = pan.parse_enrolled(pan_text)
        except pan.PanError as exc:
            errors.append(ErrorDetail("invalid_value", f"masked_pan: {exc}"))
    exp_text = need_text("exp_date", exp_date, 64)
    if exp_text is not None:
        try:
            checked_exp = parse_exp_date(exp_text)
        except ValueError as exc:
            errors.append(ErrorDetail("invalid_value", f"exp_date: {exc}."))
    holder: str | None = None
    if name is not None:
        holder = need_text("name", name, HOLDER_NAME_MAX)
        if holder is not None and pan.looks_like_full_pan(holder):
            errors.append(ErrorDetail("invalid_value", "name: must be the card holder's name."))
    if errors:
        raise InvalidRequest(errors)
    assert card_id is not None
    assert checked_pan is not None
    assert checked_exp is not None
    return CardRequest(card_id, checked_pan, checked_exp, holder)


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
        id=uuid.uuid4(),
        partner_id=issuer.id,
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
    session: Session, partner_card_id: str, masked_pan: str, namespace: str | None
) -> Card | None:
    """The card a ``CARD`` token names (SPEC §11), or None (the token is then ``unmatched``).

    ``namespace`` names the issuer by one of its namespaces; without it the ``partner_card_id``
    must be unique across issuers. The token's masked PAN must show at least the last four digits
    and agree with the card's on every digit both show. Deleted cards never match.
    """
    shown = pan.parse_shown(masked_pan)
    if shown is None or shown.last4 is None:
        return None
    query = select(Card).where(Card.partner_card_id == partner_card_id, Card.deleted_at.is_(None))
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


@dataclass(frozen=True)
class TransactionRequest:
    """A checked ``POST /api/v1/card-transactions/`` body."""

    partner_card_id: str | None
    service_card_id: str | None
    transaction_type: TransactionType
    amount: int
    currency: str
    occurred_at: datetime
    merchant_id: str
    merchant_name: str
    reference_number: str | None
    authorization_code: str | None


def check_transaction_request(data: object) -> TransactionRequest:
    """Check a card-transaction body; ``InvalidRequest`` lists every problem at once."""
    if not isinstance(data, dict):
        raise InvalidRequest([ErrorDetail("invalid_type", "$: the body must be a JSON object.")])
    errors: list[ErrorDetail] = []

    def text_field(name: str, *, required: bool, limit: int = 200) -> str | None:
        value = data.get(name)
        if value is None:
            if required:
                errors.append(ErrorDetail("missing_field", f"{name}: this field is required."))
            return None
        if not isinstance(value, str):
            errors.append(ErrorDetail("invalid_type", f"{name}: must be a string."))
            return None
        if not value.strip() or len(value) > limit:
            errors.append(
                ErrorDetail("invalid_value", f"{name}: 1 to {limit} characters, not blank.")
            )
            return None
        return value

    partner_card_id = text_field("partner_card_id", required=False)
    service_card_id = text_field("service_card_id", required=False)
    if data.get("partner_card_id") is None and data.get("service_card_id") is None:
        errors.append(
            ErrorDetail(
                "missing_field", "partner_card_id: give partner_card_id or service_card_id."
            )
        )
    kind = text_field("transaction_type", required=True, limit=16)
    transaction_type: TransactionType | None = None
    if kind is not None:
        try:
            transaction_type = TransactionType(kind)
        except ValueError:
            errors.append(
                ErrorDetail("invalid_value", "transaction_type: must be auth or clearing.")
            )
    amount = data.get("amount")
    if amount is None:
        errors.append(ErrorDetail("missing_field", "amount: this field is required."))
    elif not isinstance(amount, int) or isinstance(amount, bool):
        errors.append(
            ErrorDetail("invalid_type", "amount: must be an integer in fractional units.")
        )
    elif abs(amount) > 10**15:
        errors.append(ErrorDetail("invalid_value", "amount: out of range."))
    currency = text_field("currency", required=True, limit=3)
    if currency is not None and currency not in ISO_4217_CODES:
        errors.append(ErrorDetail("invalid_value", "currency: must be an ISO 4217 currency code."))
    stamp = text_field("timestamp", required=True, limit=64)
    occurred_at: datetime | None = None
    if stamp is not None:
        try:
            moment = datetime.fromisoformat(stamp)
            if moment.tzinfo is None or "T" not in stamp.upper():
                raise ValueError
            occurred_at = moment.astimezone(UTC)
        except ValueError:
            errors.append(
                ErrorDetail(
                    "invalid_value",
                    "timestamp: must be an ISO 8601 date-time with an offset, "
                    "e.g. 2026-01-15T14:03:11+02:00.",
                )
            )
    merchant_id = text_field("merchant_id", required=True)
    merchant_name = text_field("merchant_name", required=True, limit=500)
    reference_number = text_field("reference_number", required=False)
    authorization_code = text_field("authorization_code", required=False)
    if errors:
        raise InvalidRequest(errors)
    assert transaction_type is not None
    assert isinstance(amount, int)
    assert currency is not None
    assert occurred_at is not None
    assert merchant_id is not None
    assert merchant_name is not None
    return TransactionRequest(
        partner_card_id,
        service_card_id,
        transaction_type,
        amount,
        currency,
        occurred_at,
        merchant_id,
        merchant_name,
        reference_number,
        authorization_code,
    )


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
        purchase.id = uuid.uuid4()
        session.add(purchase)
    purchase.authorization_code = purchase.authorization_code or request.authorization_code
    purchase.reference_number = purchase.reference_number or request.reference_number
    txn = CardTransaction(
        id=uuid.uuid4(),
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
    authorization code or reference number decides (earliest first), then an equal amount if
    only one auth has it, then the only one."""
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
    if len(same_amount) == 1:
        return same_amount[0]
    if len(open_auths) == 1:
        return open_auths[0][1]
    return fresh


def _differs(a: str | None, b: str | None) -> bool:
    return a is not None and b is not None and a != b


def _same(a: str | None, b: str | None) -> bool:
    return a is not None and a == b
