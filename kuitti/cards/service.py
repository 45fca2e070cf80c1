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
from kuitti.errors import Conflict, ErrorDetail, InvalidRequest, NotFound
from kuitti.models import Card, Connection, Namespace, Partner
from kuitti.webhooks.events import NotificationType, enqueue

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
    data: dict[str, Any] = {}
    if card.holder_name is not None:
        data["name"] = card.holder_name
    data["masked_pan"] = card.masked_pan
    data["exp_date"] = iso_utc(card.exp_date)
    enqueue(
        session,
        issuer,
        NotificationType.CARD_ADDED,
        {
            "notification_type": NotificationType.CARD_ADDED.value,
            "partner_card_id": card.partner_card_id,
            "service_card_id": str(card.id),
            "data": data,
        },
        now=now,
        bare_authorization=True,
    )


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


def pilot_connection(session: Session, card: Card) -> Connection | None:
    """The active connection of a pilot card's user to the card's bank, if any."""
    if card.user_id is None:
        return None
    return session.scalar(
        select(Connection).where(
            Connection.user_id == card.user_id,
            Connection.partner_id == card.partner_id,
            Connection.revoked_at.is_(None),
        )
    )
