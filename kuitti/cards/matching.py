"""Card-linking: matching a receipt's CARD payments to enrolled cards' purchases (SPEC §7).

Precision first. Every decision is made from the payment's side by ``_evaluate``, whichever
arrival triggered it (a receipt, a transaction, the settle sweep), so the outcome does not depend
on the order of arrival:

* a *candidate* is an enrolled, non-deleted card; a card's auth and its clearing are one
  purchase, and a purchase that already served a payment is no candidate any more;
* a payment *fits* a purchase when one of its transactions has the payment's merchant id and
  currency, an equal amount (an auth: or the ``preAuthorizedAmount``), a time in the window
  (auth: ±15 min; clearing: from 15 min before to 7 days after; bounds inclusive), a masked PAN
  that agrees with the card's, and authorization codes / reference numbers that are equal where
  both the payment and the purchase have one;
* exactly one fitting card: delivered at once when the fit includes an equal authorization code
  or reference number (a *strong* fit); a fit on the other keys alone (*weak*) only once the auth
  window has closed, it is still the only card, and no more waiting payments claim that card's
  fitting purchases than there are purchases;
* zero or several cards: the payment waits with its reason; any later transaction, match or
  sweep re-evaluates it;
* pilot cards (enrolled by the operator; pilot banks report no transactions) are also candidates
  on their masked PAN alone, when the receipt shows the first six and last four digits; such a fit
  is weak.

Serialisation: every evaluation runs under ``locks.acquire(session, "match", <merchant id>)``
(a PostgreSQL advisory lock held to commit; SQLite serialises writers anyway). A fit needs equal
merchant ids, so everything one decision reads is under that one lock, and a receipt and its
transaction arriving together are decided once. The unique constraints on ``card_matches``
(``payment_id``, ``purchase_id``) are the last guard.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

import orjson
from sqlalchemy import func, or_, select
from sqlalchemy.orm import Session

from kuitti import locks
from kuitti.cards import pan
from kuitti.config import Settings
from kuitti.delivery.links import private_link
from kuitti.delivery.service import deliver_to_user, grant_via_card
from kuitti.deps import Services
from kuitti.logs import log
from kuitti.metrics import CARD_MATCH_WAITS, CARD_MATCHES, CARD_MATCHING_SECONDS
from kuitti.models import Card, Connection, Partner, Receipt
from kuitti.models.cards import (
    CardMatch,
    CardPaymentRecord,
    CardPurchase,
    CardTransaction,
    PaymentStatus,
    TransactionType,
)
from kuitti.receipts.schema import CardPayment
from kuitti.receipts.schema import Receipt as ReceiptDocument
from kuitti.receipts.validation import card_payments
from kuitti.webhooks.events import NotificationType, enqueue

AUTH_WINDOW = timedelta(minutes=15)
CLEARING_BEFORE = timedelta(minutes=15)
CLEARING_AFTER = timedelta(days=7)
MATCHING_SET_LIFETIME = timedelta(days=7)
"""Unmatched payments and transactions leave the matching set this long after their time."""
SETTLE_BATCH = 200


def _iso(moment: datetime) -> str:
    return moment.astimezone(UTC).isoformat().replace("+00:00", "Z")


# -- recording a receipt's payments ------------------------------------------------------------


def match_receipt(
    session: Session,
    settings: Settings,
    receipt: Receipt,
    document: ReceiptDocument,
    *,
    now: datetime,
) -> None:
    """Record the receipt's CARD payments for matching and deliver any that match already."""
    payments = card_payments(document)
    if not payments:
        return
    records = [_record(receipt, document, index, payment, now) for index, payment in payments]
    session.add_all(records)
    session.flush()
    merchant_ids = sorted({r.merchant_id for r in records if r.merchant_id is not None})
    for merchant_id in merchant_ids:  # sorted: two writers never take them in opposite orders
        locks.acquire(session, "match", merchant_id)
    with CARD_MATCHING_SECONDS.labels("receipt").time():
        _match_records(session, settings, records, merchant_ids, now)


def _match_records(
    session: Session,
    settings: Settings,
    records: list[CardPaymentRecord],
    merchant_ids: list[str],
    now: datetime,
) -> None:
    matcher = Matcher(session, settings, now)
    for record in records:
        if record.status == PaymentStatus.WAITING:
            matcher.evaluate(record)
    matcher.run()
    for merchant_id in merchant_ids:
        matcher.settle_due(merchant_id)


def _record(
    receipt: Receipt,
    document: ReceiptDocument,
    index: int,
    payment: CardPayment,
    now: datetime,
) -> CardPaymentRecord:
    attrs = payment.attributes
    stamp = attrs.timeStamp if attrs is not None and attrs.timeStamp else document.receiptTimeStamp
    paid_at = datetime.fromisoformat(stamp).astimezone(UTC)
    shown = pan.parse_shown(attrs.maskedPAN) if attrs is not None and attrs.maskedPAN else None
    record = CardPaymentRecord(
        id=uuid.uuid4(),
        receipt_id=receipt.id,
        payment_index=index,
        status=PaymentStatus.WAITING.value,
        merchant_id=(attrs.MID or None) if attrs is not None else None,
        amount=payment.amount,
        pre_authorized_amount=attrs.preAuthorizedAmount if attrs is not None else None,
        currency=(attrs.currencyISOCode if attrs is not None else None) or document.currencyISOCode,
        paid_at=paid_at,
        masked_pan=shown.text if shown is not None else None,
        pan_last4=shown.last4 if shown is not None else None,
        authorization_code=(attrs.authorizationCode or None) if attrs is not None else None,
        reference_number=(attrs.referenceNumber or None) if attrs is not None else None,
        settle_at=None,
        reason={},
        created_at=now,
        updated_at=now,
    )
    missing = []
    if record.merchant_id is None:
        missing.append("MID")
    if record.pan_last4 is None:
        missing.append("maskedPAN showing the last four digits")
    if missing:
        record.status = PaymentStatus.UNMATCHABLE.value
        record.reason = {
            "why": "unmatchable",
            "detail": f"The CARD payment lacks {' and '.join(missing)}, which matching needs.",
            "checked_at": _iso(now),
        }
    return record


# -- fitting -------------------------------------------------------------------------------------


@dataclass
class Fit:
    """One purchase of one card that a payment fits, and on which keys."""

    card: Card
    purchase: CardPurchase | None  # None: a pilot card on its masked PAN alone
    transaction: CardTransaction | None
    keys: list[str]
    window: str
    strong: bool
    distance_seconds: float = 0.0

    @property
    def kind(self) -> str:
        return "transaction" if self.purchase is not None else "masked_pan_only"


def _card_pan(card: Card) -> pan.MaskedPan:
    return pan.of_card(card.masked_pan, card.pan_first6, card.pan_last4)


def _shown(record: CardPaymentRecord) -> pan.MaskedPan | None:
    return pan.parse_shown(record.masked_pan) if record.masked_pan else None


def fit(
    record: CardPaymentRecord, card: Card, purchase: CardPurchase, txn: CardTransaction
) -> Fit | None:
    """Whether the payment fits this transaction of this purchase (SPEC §7), and how."""
    if card.deleted_at is not None or txn.merchant_id != record.merchant_id:
        return None
    if txn.currency != record.currency:
        return None
    keys = ["merchant_id", "currency"]
    if txn.amount == record.amount:
        keys.append("amount")
    elif txn.transaction_type == TransactionType.AUTH and (
        record.pre_authorized_amount is not None and txn.amount == record.pre_authorized_amount
    ):
        keys.append("pre_authorized_amount")
    else:
        return None
    offset = record.paid_at - txn.occurred_at
    if txn.transaction_type == TransactionType.AUTH:
        if abs(offset) > AUTH_WINDOW:
            return None
        window = "auth (±15 min)"
    else:
        if not -CLEARING_BEFORE <= offset <= CLEARING_AFTER:
            return None
        window = "clearing (15 min before to 7 days after)"
    keys.append("time")
    shown = _shown(record)
    if shown is None or not pan.agree(_card_pan(card), shown):
        return None
    keys.append("masked_pan")
    strong = False
    for name, mine, theirs in (
        ("authorization_code", record.authorization_code, purchase.authorization_code),
        ("reference_number", record.reference_number, purchase.reference_number),
    ):
        if mine is not None and theirs is not None:
            if mine != theirs:
                return None
            keys.append(name)
            strong = True
    return Fit(card, purchase, txn, keys, window, strong, abs(offset.total_seconds()))


# -- the matcher -------------------------------------------------------------------------------


@dataclass
class Matcher:
    """Evaluates waiting payments in one unit of work, following up what each match changes.

    The caller holds the ``match`` lock of every merchant id involved."""

    session: Session
    settings: Settings
    now: datetime
    _queue: list[CardPaymentRecord] = field(default_factory=list)
    matched: list[CardMatch] = field(default_factory=list)

    def evaluate(self, record: CardPaymentRecord) -> None:
        if record not in self._queue:
            self._queue.append(record)

    def run(self) -> None:
        rounds = 0
        while self._queue:
            record = self._queue.pop(0)
            rounds += 1
            assert rounds < 10_000, "matching did not converge"
            if record.status == PaymentStatus.WAITING:
                self._decide(record)

    # lookups ----------------------------------------------------------------------------------

    def fits(self, record: CardPaymentRecord) -> list[Fit]:
        """Every fitting purchase (and pilot card) for a waiting payment: indexed lookups by
        merchant id, amount, last four and a time range; then the full rules in Python."""
        if record.merchant_id is None or record.pan_last4 is None:
            return []
        horizon = self.now - MATCHING_SET_LIFETIME
        wanted: list[tuple[int, str, datetime, datetime]] = [
            # (amount, type, earliest, latest transaction time)
            (record.amount, "any", record.paid_at - CLEARING_AFTER, record.paid_at + AUTH_WINDOW)
        ]
        if record.pre_authorized_amount is not None and (
            record.pre_authorized_amount != record.amount
        ):
            wanted.append(
                (
                    record.pre_authorized_amount,
                    TransactionType.AUTH.value,
                    record.paid_at - AUTH_WINDOW,
                    record.paid_at + AUTH_WINDOW,
                )
            )
        found: list[Fit] = []
        for amount, kind, earliest, latest in wanted:
            query = (
                select(CardTransaction, CardPurchase, Card)
                .join(CardPurchase, CardPurchase.id == CardTransaction.purchase_id)
                .join(Card, Card.id == CardTransaction.card_id)
                .where(
                    CardTransaction.merchant_id == record.merchant_id,
                    CardTransaction.amount == amount,
                    CardTransaction.pan_last4 == record.pan_last4,
                    CardTransaction.occurred_at >= max(earliest, horizon),
                    CardTransaction.occurred_at <= latest,
                    CardPurchase.payment_id.is_(None),
                    Card.deleted_at.is_(None),
                )
            )
            if kind != "any":
                query = query.where(CardTransaction.transaction_type == kind)
            # Codes that differ rule a purchase out; filtering here keeps dense merchant ids
            # (a café's 3.50 coffees) from loading every rival purchase. ``fit`` checks again.
            if record.authorization_code is not None:
                query = query.where(
                    or_(
                        CardPurchase.authorization_code.is_(None),
                        CardPurchase.authorization_code == record.authorization_code,
                    )
                )
            if record.reference_number is not None:
                query = query.where(
                    or_(
                        CardPurchase.reference_number.is_(None),
                        CardPurchase.reference_number == record.reference_number,
                    )
                )
            for txn, purchase, card in self.session.execute(query).all():
                result = fit(record, card, purchase, txn)
                if result is not None:
                    found.append(result)
        found.extend(self._pilot_fits(record))
        return found

    def _pilot_fits(self, record: CardPaymentRecord) -> list[Fit]:
        shown = _shown(record)
        if shown is None or len(shown.leading) < 6 or shown.last4 is None:
            return []
        cards = self.session.scalars(
            select(Card).where(
                Card.pan_last4 == shown.last4,
                Card.pan_first6 == shown.leading[:6],
                Card.pilot.is_(True),
                Card.deleted_at.is_(None),
            )
        )
        return [
            Fit(card, None, None, ["masked_pan (pilot card)"], "none", strong=False)
            for card in cards
            if pan.agree(_card_pan(card), shown)
        ]

    def waiting_for(self, txn: CardTransaction) -> list[CardPaymentRecord]:
        """Waiting payments that this transaction could fit (the reverse lookup)."""
        if txn.transaction_type == TransactionType.AUTH:
            earliest, latest = txn.occurred_at - AUTH_WINDOW, txn.occurred_at + AUTH_WINDOW
        else:
            earliest, latest = txn.occurred_at - CLEARING_BEFORE, txn.occurred_at + CLEARING_AFTER
        earliest = max(earliest, self.now - MATCHING_SET_LIFETIME)
        columns: list[Any] = [CardPaymentRecord.amount]
        if txn.transaction_type == TransactionType.AUTH:
            columns.append(CardPaymentRecord.pre_authorized_amount)
        found: dict[uuid.UUID, CardPaymentRecord] = {}
        for column in columns:
            query = select(CardPaymentRecord).where(
                CardPaymentRecord.merchant_id == txn.merchant_id,
                column == txn.amount,
                CardPaymentRecord.pan_last4 == txn.pan_last4,
                CardPaymentRecord.paid_at >= earliest,
                CardPaymentRecord.paid_at <= latest,
                CardPaymentRecord.status == PaymentStatus.WAITING.value,
            )
            for record in self.session.scalars(query):
                found[record.id] = record
        return list(found.values())

    def purchase_transactions(self, purchase_id: uuid.UUID) -> list[CardTransaction]:
        return list(
            self.session.scalars(
                select(CardTransaction).where(CardTransaction.purchase_id == purchase_id)
            )
        )

    def on_transaction(self, txn: CardTransaction) -> None:
        """A transaction arrived (or joined a purchase): re-evaluate every waiting payment that
        any transaction of its purchase could fit, since the purchase's codes may have changed."""
        for other in self.purchase_transactions(txn.purchase_id):
            for record in self.waiting_for(other):
                self.evaluate(record)
        self.run()

    # deciding ---------------------------------------------------------------------------------

    def _decide(self, record: CardPaymentRecord) -> None:
        record.updated_at = self.now
        if record.paid_at < self.now - MATCHING_SET_LIFETIME:
            record.status = PaymentStatus.EXPIRED.value
            record.settle_at = None
            record.reason = {
                "why": "expired",
                "detail": "Unmatched 7 days after the payment time: it left the matching set.",
                "checked_at": _iso(self.now),
            }
            return
        fits = self.fits(record)
        by_card: dict[uuid.UUID, list[Fit]] = {}
        for item in fits:
            by_card.setdefault(item.card.id, []).append(item)
        if not by_card:
            self._wait(record, "no_candidate", "No enrolled card has a fitting purchase.", [])
            return
        if len(by_card) > 1:
            self._wait(
                record,
                "tied",
                f"{len(by_card)} cards fit; a receipt goes to a user only when exactly one does.",
                fits,
            )
            return
        card_fits = next(iter(by_card.values()))
        strong = [f for f in card_fits if f.strong]
        if strong:
            self._match(record, _best(strong), fits, at_once=True)
            return
        settle_at = record.paid_at + AUTH_WINDOW
        if self.now < settle_at:
            self._wait(
                record,
                "awaiting_window",
                "One card fits on keys alone (no equal authorization code or reference "
                "number); it is delivered once the auth window has closed if it is still the "
                "only one.",
                fits,
                settle_at=settle_at,
            )
            return
        purchases = {f.purchase.id: f.purchase for f in card_fits if f.purchase is not None}
        if purchases:
            rivals = self._claimants(record, card_fits)
            if len(rivals) + 1 > len(purchases):
                self._wait(
                    record,
                    "contested",
                    f"{len(rivals) + 1} waiting payments fit this card's {len(purchases)} "
                    "fitting purchase(s) on keys alone; a purchase serves at most one payment.",
                    fits,
                    rivals=[str(r.receipt_id) for r in rivals],
                )
                return
        self._match(record, _best(card_fits), fits, at_once=False)

    def _claimants(
        self, record: CardPaymentRecord, card_fits: list[Fit]
    ) -> list[CardPaymentRecord]:
        """Other waiting payments that fit any of these purchases."""
        rivals: dict[uuid.UUID, CardPaymentRecord] = {}
        for item in card_fits:
            if item.purchase is None:
                continue
            for txn in self.purchase_transactions(item.purchase.id):
                for other in self.waiting_for(txn):
                    if other.id == record.id or other.id in rivals:
                        continue
                    if fit(other, item.card, item.purchase, txn) is not None:
                        rivals[other.id] = other
        return list(rivals.values())

    def _wait(
        self,
        record: CardPaymentRecord,
        why: str,
        detail: str,
        fits: list[Fit],
        *,
        settle_at: datetime | None = None,
        rivals: list[str] | None = None,
    ) -> None:
        record.settle_at = settle_at
        CARD_MATCH_WAITS.labels(why).inc()
        reason: dict[str, Any] = {"why": why, "detail": detail, "checked_at": _iso(self.now)}
        if fits:
            reason["candidates"] = [_fit_json(f) for f in fits]
        if settle_at is not None:
            reason["settle_at"] = _iso(settle_at)
        if rivals:
            reason["rival_receipt_ids"] = rivals
        record.reason = reason

    def _match(
        self, record: CardPaymentRecord, chosen: Fit, fits: list[Fit], *, at_once: bool
    ) -> None:
        card = chosen.card
        record.status = PaymentStatus.MATCHED.value
        record.settle_at = None
        explanation = _fit_json(chosen)
        explanation["delivered"] = (
            "at once: the fit includes an equal authorization code or reference number"
            if at_once
            else "after the auth window closed, as the only fitting card"
        )
        explanation["fits_considered"] = len(fits)
        explanation["paid_at"] = _iso(record.paid_at)
        if chosen.purchase is not None:
            chosen.purchase.payment_id = record.id
            explanation["purchase_transaction_ids"] = sorted(
                str(t.id) for t in self.purchase_transactions(chosen.purchase.id)
            )
        record.reason = {"why": "matched", "checked_at": _iso(self.now)}
        match = CardMatch(
            id=uuid.uuid4(),
            payment_id=record.id,
            receipt_id=record.receipt_id,
            card_id=card.id,
            purchase_id=chosen.purchase.id if chosen.purchase is not None else None,
            user_id=card.user_id,
            explanation=explanation,
            matched_at=self.now,
        )
        self.session.add(match)
        self.session.flush()
        self.matched.append(match)
        strength = "masked_pan" if chosen.purchase is None else ("code" if at_once else "keys")
        CARD_MATCHES.labels(strength).inc()
        self._deliver(record, chosen)
        # The purchase is taken, and this payment no longer contests the others it fitted:
        # payments that counted either may now be decided.
        seen: set[uuid.UUID] = set()
        for item in fits:
            if item.purchase is None or item.purchase.id in seen:
                continue
            seen.add(item.purchase.id)
            for txn in self.purchase_transactions(item.purchase.id):
                for other in self.waiting_for(txn):
                    self.evaluate(other)

    def _deliver(self, record: CardPaymentRecord, chosen: Fit) -> None:
        card = chosen.card
        receipt = self.session.get(Receipt, record.receipt_id)
        issuer = self.session.get(Partner, card.partner_id)
        assert receipt is not None
        assert issuer is not None
        if card.user_id is not None:
            deliver_to_user(self.session, receipt, card.user_id, via="card", now=self.now)
        grant_via_card(self.session, receipt, card)
        if card.pilot:
            self._full_receipt(receipt, issuer, card)
            return
        data: dict[str, Any] = {
            "receipt_id": str(receipt.id),
            "merchant_name": receipt.merchant_name,
            "timestamp": _iso(record.paid_at),
            "amount": str(record.amount),
            "merchant_id": record.merchant_id,
        }
        txn = chosen.transaction
        reference = record.reference_number or (txn.reference_number if txn else None)
        authorization = record.authorization_code or (txn.authorization_code if txn else None)
        if reference is not None:
            data["reference_number"] = reference
        if authorization is not None:
            data["authorization_code"] = authorization
        data["transaction_type"] = txn.transaction_type if txn is not None else "auth"
        enqueue(
            self.session,
            issuer,
            NotificationType.RECEIPT,
            {
                "notification_type": NotificationType.RECEIPT.value,
                "partner_card_id": card.partner_card_id,
                "service_card_id": str(card.id),
                "data": data,
            },
            now=self.now,
            bare_authorization=True,
        )

    def _full_receipt(self, receipt: Receipt, bank: Partner, card: Card) -> None:
        matches_for_bank = self.session.scalar(
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
        connection = pilot_connection(self.session, card)
        enqueue(
            self.session,
            bank,
            NotificationType.FULL_RECEIPT,
            {
                "service_id": str(connection.id) if connection is not None else None,
                "notification_type": NotificationType.FULL_RECEIPT.value,
                "receipt_id": str(receipt.id),
                "receipt_json": orjson.loads(receipt.document),
                "receipt_web_url": private_link(self.settings, receipt.id),
            },
            now=self.now,
        )

    # the deferred re-check --------------------------------------------------------------------

    def settle_due(self, merchant_id: str, *, limit: int = SETTLE_BATCH) -> int:
        """Decide this merchant id's payments whose auth window has closed (lock held)."""
        due = list(
            self.session.scalars(
                select(CardPaymentRecord)
                .where(
                    CardPaymentRecord.merchant_id == merchant_id,
                    CardPaymentRecord.settle_at.is_not(None),
                    CardPaymentRecord.settle_at <= self.now,
                )
                .order_by(CardPaymentRecord.settle_at)
                .limit(limit)
            )
        )
        for record in due:
            self.evaluate(record)
        self.run()
        return len(due)


def _best(fits: list[Fit]) -> Fit:
    """Among one card's fits: a transaction fit before a masked-PAN-only one, then the nearest
    in time, then the earliest transaction."""
    return min(
        fits,
        key=lambda f: (
            f.purchase is None,
            f.distance_seconds,
            f.transaction.occurred_at
            if f.transaction is not None
            else datetime.max.replace(tzinfo=UTC),
        ),
    )


def _fit_json(item: Fit) -> dict[str, Any]:
    out: dict[str, Any] = {
        "service_card_id": str(item.card.id),
        "partner_card_id": item.card.partner_card_id,
        "issuer_partner_id": str(item.card.partner_id),
        "pilot": item.card.pilot,
        "kind": item.kind,
        "keys": item.keys,
        "window": item.window,
        "strong": item.strong,
    }
    if item.transaction is not None:
        out["transaction_id"] = str(item.transaction.id)
        out["transaction_type"] = item.transaction.transaction_type
        out["transaction_time"] = _iso(item.transaction.occurred_at)
    if item.purchase is not None:
        out["purchase_id"] = str(item.purchase.id)
    return out


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


# -- the sweep (worker) and explanations ---------------------------------------------------------


def settle_due_matches(services: Services, *, limit: int = SETTLE_BATCH) -> int:
    """The deferred re-check: decide payments whose auth window has closed, one merchant id per
    unit of work (under its lock), then expire what left the matching set. Run by the delivery
    worker's loop (``run_settler``) and by ``kuitti card settle``; each arrival also settles its
    own merchant id's due payments. Returns how many payments were decided or expired (call
    again while it returns nonzero to drain a backlog)."""
    now = services.clock.now()
    with services.db.session(write=False) as session:
        rows = session.scalars(
            select(CardPaymentRecord.merchant_id)
            .where(
                CardPaymentRecord.settle_at.is_not(None),
                CardPaymentRecord.settle_at <= now,
            )
            .order_by(CardPaymentRecord.settle_at)
            .limit(limit)
        ).all()
    merchant_ids = list(dict.fromkeys(m for m in rows if m is not None))
    total = 0
    for merchant_id in merchant_ids:
        with services.db.session() as session, CARD_MATCHING_SECONDS.labels("settle").time():
            locks.acquire(session, "match", merchant_id)
            total += Matcher(session, services.settings, now).settle_due(merchant_id)
    with services.db.session() as session:
        total += expire_unmatched(session, now, limit=limit)
    return total


def expire_unmatched(session: Session, now: datetime, *, limit: int = SETTLE_BATCH) -> int:
    """Mark waiting payments older than the matching set's lifetime as expired."""
    stale = list(
        session.scalars(
            select(CardPaymentRecord)
            .where(
                CardPaymentRecord.status == PaymentStatus.WAITING.value,
                CardPaymentRecord.paid_at < now - MATCHING_SET_LIFETIME,
            )
            .order_by(CardPaymentRecord.paid_at)
            .limit(limit)
        )
    )
    for record in stale:
        record.status = PaymentStatus.EXPIRED.value
        record.settle_at = None
        record.updated_at = now
        record.reason = {
            "why": "expired",
            "detail": "Unmatched 7 days after the payment time: it left the matching set.",
            "last_reason": record.reason,
            "checked_at": _iso(now),
        }
    return len(stale)


SETTLE_INTERVAL_SECONDS = 30.0


async def run_settler(services: Services, stop: asyncio.Event) -> None:
    """Run ``settle_due_matches`` every ``SETTLE_INTERVAL_SECONDS`` until ``stop`` is set (for the
    delivery worker's task group)."""
    while not stop.is_set():
        try:
            await asyncio.to_thread(settle_due_matches, services)
        except Exception as exc:  # a database outage must not end the loop; retry next round
            log.warning("settle_due_matches failed", error=type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SETTLE_INTERVAL_SECONDS)


def explain_receipt(session: Session, receipt_id: uuid.UUID, now: datetime) -> dict[str, Any]:
    """Why each CARD payment of a receipt matched, or why it waits (``kuitti receipts explain``)."""
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
            "paid_at": _iso(record.paid_at),
            "masked_pan": record.masked_pan,
            "authorization_code": record.authorization_code,
            "reference_number": record.reference_number,
            "reason": record.reason,
        }
        match = session.scalar(select(CardMatch).where(CardMatch.payment_id == record.id))
        if match is not None:
            item["match"] = {"matched_at": _iso(match.matched_at), **match.explanation}
        payments.append(item)
    return {"receipt_id": str(receipt_id), "card_payments": payments}
