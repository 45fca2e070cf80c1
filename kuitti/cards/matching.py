"""Card-linking: matching a receipt's CARD payments to enrolled cards' purchases, in the
database (the fit rules themselves are in ``kuitti.cards.rules``).

Precision first. Every decision is made from the payment's side by ``Matcher._decide``,
whichever arrival triggered it (a receipt, a transaction, the settle sweep), so the outcome does
not depend on the order of arrival:

* a *candidate* is an enrolled, non-deleted card; a card's auth and its clearing are one
  purchase, and a purchase that already served a payment is no candidate any more;
* a payment *fits* a purchase by ``rules.fit`` (auth: ±15 min of the payment; clearing: from
  15 min before to 7 days after it);
* exactly one fitting card with an equal authorization code or reference number (a *strong*
  fit): delivered at once; a pilot card that is the only enrolled card agreeing with the
  receipt's masked PAN: delivered at once;
* fits on keys alone (*weak*), on one card or several, once the auth window has closed: decided
  by ``rules.contest`` among every waiting payment that claims the same purchases — delivered
  when every way of giving each its own purchase gives this one the same card; else it waits
  (``contested`` or ``tied``); any later transaction, match or sweep re-evaluates it.

Serialisation: every evaluation runs under ``locks.acquire(session, "match", <merchant id>)``
(a PostgreSQL advisory lock held to commit; SQLite serialises writers anyway). A fit needs equal
merchant ids, so everything one decision reads is under that one lock, and a receipt and its
transaction arriving together are decided once. The unique constraints on ``card_matches``
(``payment_id``, ``purchase_id``) are the last guard.

Why one long module: after the pure rules (``rules``), the explanations (``explain``) and the
notifications (``notifications``) moved out, what stays is one decision procedure that reads and
writes under one lock; kept in one file so the serialisation argument above can be checked
against all the code it covers.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, assert_never

from sqlalchemy import and_, delete, or_, select
from sqlalchemy.orm import Session, aliased

from kuitti import pan
from kuitti.cards import wakeups
from kuitti.cards.notifications import deliver_match
from kuitti.cards.rules import (
    AUTH_WINDOW,
    MATCHING_SET_LIFETIME,
    Fit,
    Outcome,
    Verdict,
    best,
    card_pan,
    contest,
    fit,
    fit_json,
    judge,
    payment_times,
    pilot_fit,
    shown_pan,
    shows_pilot_digits,
    transaction_times,
)
from kuitti.clock import iso_utc
from kuitti.config import Settings
from kuitti.db import Base, database_of
from kuitti.ids import new_id
from kuitti.metrics import CARD_MATCH_WAITS, CARD_MATCHES, CARD_MATCHING_DELAY
from kuitti.models import Card, Receipt
from kuitti.models.cards import (
    CardMatch,
    CardMatchingQueue,
    CardPaymentRecord,
    CardPurchase,
    CardTransaction,
    PaymentStatus,
    TransactionType,
)
from kuitti.receipts.schema import CardPayment
from kuitti.receipts.schema import Receipt as ReceiptDocument

SETTLE_BATCH = 200
CONTEST_LIMIT = 64
"""A contest for one card's purchases with more waiting payments than this waits undecided."""
AT_ONCE = "at once: the fit includes an equal authorization code or reference number"
PILOT_AT_ONCE = (
    "at once: a pilot card, the only enrolled card that agrees with the receipt's masked PAN"
)
AFTER_WINDOW = "after the auth window closed, as the only fitting card"


# -- recording a receipt's payments ------------------------------------------------------------


def record_card_payments(
    session: Session, receipt: Receipt, document: ReceiptDocument, *, now: datetime
) -> None:
    """Record the receipt's CARD payments, queued for matching, in the ingest transaction.

    Nothing is decided here: the worker, woken by this transaction's commit (``wakeups``),
    matches them in batches per merchant id (``settler.settle_due_matches``), so the receipt's
    answer never waits for card-linking and a crash after the commit loses nothing — a payment
    stays queued until the transaction that decides it."""
    rows = card_payment_rows(receipt.id, document, sandbox=receipt.sandbox, now=now)
    database_of(session).insert_rows(session, card_payment_inserts(session, rows))


def card_payment_inserts(
    session: Session, rows: list[dict[str, Any]]
) -> dict[type[Base], list[dict[str, Any]]]:
    """What ``Database.insert_rows`` inserts to record payments of ``card_payment_rows`` (of any
    number of receipts): the payments, and a ``CardMatchingQueue`` entry for each one that waits
    for the worker. The worker's wake-up is announced for the commit."""
    queued = [
        {"payment_id": row["id"], "merchant_id": row["merchant_id"]}
        for row in rows
        if row["status"] == PaymentStatus.WAITING.value
    ]
    if queued:
        wakeups.MATCHING.announce(session)
    return {CardPaymentRecord: rows, CardMatchingQueue: queued}


def card_payment_rows(
    receipt_id: uuid.UUID, document: ReceiptDocument, *, sandbox: bool, now: datetime
) -> list[dict[str, Any]]:
    """The rows recording a receipt's CARD payments (``insert_card_payments``)."""
    return [
        _row(receipt_id, document, index, payment, sandbox, now)
        for index, payment in enumerate(document.payments or [])
        if isinstance(payment, CardPayment)
    ]


def _row(
    receipt_id: uuid.UUID,
    document: ReceiptDocument,
    index: int,
    payment: CardPayment,
    sandbox: bool,
    now: datetime,
) -> dict[str, Any]:
    attrs = payment.attributes
    stamp = attrs.timeStamp if attrs is not None and attrs.timeStamp else document.receiptTimeStamp
    paid_at = datetime.fromisoformat(stamp).astimezone(UTC)
    shown = pan.parse_shown(attrs.maskedPAN) if attrs is not None and attrs.maskedPAN else None
    row: dict[str, Any] = {
        "id": new_id(),
        "receipt_id": receipt_id,
        "payment_index": index,
        "status": PaymentStatus.WAITING.value,
        "merchant_id": (attrs.MID or None) if attrs is not None else None,
        "amount": payment.amount,
        "pre_authorized_amount": attrs.preAuthorizedAmount if attrs is not None else None,
        "currency": (attrs.currencyISOCode if attrs is not None else None)
        or document.currencyISOCode,
        "paid_at": paid_at,
        "masked_pan": shown.text if shown is not None else None,
        "pan_last4": shown.last4 if shown is not None else None,
        "authorization_code": (attrs.authorizationCode or None) if attrs is not None else None,
        "reference_number": (attrs.referenceNumber or None) if attrs is not None else None,
        "sandbox": sandbox,
        "settle_at": None,
        "reason": {
            "why": "pending",
            "detail": "Recorded with the receipt; the matching worker decides it after the "
            "receipt's commit.",
            "checked_at": iso_utc(now),
        },
        "created_at": now,
        "updated_at": now,
    }
    missing = []
    if row["merchant_id"] is None:
        missing.append("MID")
    if row["pan_last4"] is None:
        missing.append("maskedPAN showing the last four digits")
    if missing:
        row["status"] = PaymentStatus.UNMATCHABLE.value
        row["reason"] = {
            "why": "unmatchable",
            "detail": f"The CARD payment lacks {' and '.join(missing)}, which matching needs.",
            "checked_at": iso_utc(now),
        }
    return row


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
    _dequeued: set[uuid.UUID] = field(default_factory=set)
    """Payments whose ``CardMatchingQueue`` entries ``run`` deletes: decided for the first time."""

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
        if self._dequeued:
            _dequeue(self.session, self._dequeued)
            self._dequeued.clear()

    # lookups ----------------------------------------------------------------------------------

    def fits(self, record: CardPaymentRecord) -> list[Fit]:
        """Every fitting purchase (and pilot card) for a waiting payment: indexed lookups by
        merchant id, amount, last four and a time range; then the full rules in Python."""
        if record.merchant_id is None or record.pan_last4 is None:
            return []
        horizon = self.now - MATCHING_SET_LIFETIME
        wanted: list[tuple[int, str, datetime, datetime]] = [
            # (amount, type, earliest, latest transaction time)
            (record.amount, "any", *transaction_times(record.paid_at))
        ]
        if record.pre_authorized_amount is not None and (
            record.pre_authorized_amount != record.amount
        ):
            wanted.append(
                (
                    record.pre_authorized_amount,
                    TransactionType.AUTH.value,
                    *payment_times(TransactionType.AUTH, record.paid_at),
                )
            )
        found: list[Fit] = []
        for amount, kind, earliest, latest in wanted:
            anchor = aliased(CardTransaction)  # the purchase's auth, if it has one
            query = (
                select(CardTransaction, CardPurchase, Card, anchor.occurred_at)
                .join(CardPurchase, CardPurchase.id == CardTransaction.purchase_id)
                .join(Card, Card.id == CardTransaction.card_id)
                .outerjoin(
                    anchor,
                    and_(
                        anchor.purchase_id == CardPurchase.id,
                        anchor.transaction_type == TransactionType.AUTH.value,
                    ),
                )
                .where(
                    CardTransaction.merchant_id == record.merchant_id,
                    CardTransaction.amount == amount,
                    CardTransaction.pan_last4 == record.pan_last4,
                    CardTransaction.occurred_at >= max(earliest, horizon),
                    CardTransaction.occurred_at <= latest,
                    CardPurchase.payment_id.is_(None),
                    Card.deleted_at.is_(None),
                    # Test receipts and test cards only ever meet each other.
                    Card.sandbox.is_(record.sandbox),
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
            for txn, purchase, card, auth_at in self.session.execute(query).all():
                result = fit(record, card, purchase, txn, auth_at=auth_at)
                if result is not None:
                    found.append(result)
        found.extend(self._pilot_fits(record))
        return found

    def _pilot_fits(self, record: CardPaymentRecord) -> list[Fit]:
        shown = shown_pan(record)
        if shown is None or not shows_pilot_digits(shown):
            return []
        cards = self.session.scalars(
            select(Card).where(
                Card.pan_last4 == shown.last4,
                Card.pan_first6 == shown.leading[:6],
                Card.pilot.is_(True),
                Card.deleted_at.is_(None),
                Card.sandbox.is_(record.sandbox),
            )
        )
        return [found for card in cards if (found := pilot_fit(record, card)) is not None]

    def waiting_for(self, txn: CardTransaction) -> list[CardPaymentRecord]:
        """Waiting payments that this transaction could fit (the reverse lookup)."""
        earliest, latest = payment_times(txn.transaction_type, txn.occurred_at)
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

    def auth_time(self, purchase_id: uuid.UUID) -> datetime | None:
        """The time of the purchase's auth (None: the issuer sent only a clearing)."""
        return self.session.scalar(
            select(CardTransaction.occurred_at).where(
                CardTransaction.purchase_id == purchase_id,
                CardTransaction.transaction_type == TransactionType.AUTH.value,
            )
        )

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
        if _pending(record):
            CARD_MATCHING_DELAY.observe((self.now - record.created_at).total_seconds())
            self._dequeued.add(record.id)
        if record.paid_at < self.now - MATCHING_SET_LIFETIME:
            expire(record, self.now)
            return
        fits = self.fits(record)
        pilot = any(f.purchase is None for f in fits)
        judgement = judge(
            fits,
            record.paid_at,
            self.now,
            cards_with_this_pan=self._cards_with_pan(record) if pilot else 0,
        )
        card_fits = judgement.card_fits
        match judgement.verdict:
            case Verdict.NO_CANDIDATE:
                self._wait(record, "no_candidate", "No enrolled card has a fitting purchase.", [])
                return
            case Verdict.TIED:
                settle_at = record.paid_at + AUTH_WINDOW
                weak = not any(f.strong or f.purchase is None for f in fits)
                if not weak or self.now < settle_at:
                    self._wait(
                        record,
                        "tied",
                        f"{len({f.card.id for f in fits})} cards fit; a receipt goes to a user "
                        "only when exactly one does.",
                        fits,
                        settle_at=settle_at if weak else None,
                    )
                    return
            case Verdict.AT_ONCE:
                self._match(record, best(card_fits), fits, delivered=AT_ONCE)
                return
            case Verdict.PILOT_AT_ONCE:
                self._match(record, best(card_fits), fits, delivered=PILOT_AT_ONCE)
                return
            case Verdict.AWAITING_WINDOW:
                self._wait(
                    record,
                    "awaiting_window",
                    "One card fits on keys alone (no equal authorization code or reference "
                    "number); it is delivered once the auth window has closed if it is still "
                    "the only one.",
                    fits,
                    settle_at=judgement.settle_at,
                )
                return
            case Verdict.WEAK:
                pass
            case _:
                assert_never(judgement.verdict)
        if card_fits and all(f.purchase is None for f in card_fits):
            self._match(record, best(card_fits), fits, delivered=AFTER_WINDOW)
            return
        self._contest(record, fits)

    def _contest(self, record: CardPaymentRecord, fits: list[Fit]) -> None:
        """Decide a payment that fits on keys alone, once its auth window has closed, among
        every waiting payment that claims the same purchases (``rules.contest``)."""
        claims, claimants, card_of = self._claims(record, fits)
        mine: uuid.UUID | None = None
        outcome = Outcome.UNSERVED
        if len(claims) <= CONTEST_LIMIT:
            decided = contest(record.id, claims, card_of)
            outcome, mine = decided
        if mine is None:
            purchases = {p for wanted in claims.values() for p in wanted}
            rivals = [str(r.receipt_id) for r in claimants.values() if r.id != record.id]
            detail = (
                f"{len(claims)} waiting payments fit {len(purchases)} purchase(s) on keys alone; "
                + (
                    "they could be shared out in ways that give this one different cards."
                    if outcome is Outcome.TIED
                    else "no way gives each its own purchase (a purchase serves at most one "
                    "payment)."
                )
            )
            self._wait(record, outcome.value, detail, fits, rivals=rivals)
            return
        chosen = best([f for f in fits if f.purchase is not None and f.purchase.id == mine])
        self._match(record, chosen, fits, delivered=AFTER_WINDOW)

    def _claims(
        self, record: CardPaymentRecord, fits: list[Fit]
    ) -> tuple[
        dict[uuid.UUID, list[uuid.UUID]],
        dict[uuid.UUID, CardPaymentRecord],
        dict[uuid.UUID, uuid.UUID],
    ]:
        """The contest around a payment: every waiting payment that fits one of its purchases,
        each with the purchases it fits (nearest in time first), followed to closure (a rival's
        other purchases, and their rivals); the payments by id; each purchase's card."""
        fits_of: dict[uuid.UUID, list[Fit]] = {record.id: [f for f in fits if f.purchase]}
        claimants: dict[uuid.UUID, CardPaymentRecord] = {record.id: record}
        expanded: set[uuid.UUID] = set()
        pending = list(fits_of[record.id])
        while pending and len(fits_of) <= CONTEST_LIMIT:
            item = pending.pop()
            purchase = item.purchase
            if purchase is None or purchase.id in expanded:
                continue
            expanded.add(purchase.id)
            for txn in self.purchase_transactions(purchase.id):
                for other in self.waiting_for(txn):
                    anchored = self.auth_time(purchase.id)
                    if other.id in fits_of or not fit(other, item.card, purchase, txn, anchored):
                        continue
                    claimants[other.id] = other
                    fits_of[other.id] = [f for f in self.fits(other) if f.purchase]
                    pending.extend(fits_of[other.id])
        claims: dict[uuid.UUID, list[uuid.UUID]] = {}
        card_of: dict[uuid.UUID, uuid.UUID] = {}
        for payment_id in sorted(fits_of, key=lambda i: claimants[i].paid_at):
            ordered = sorted(fits_of[payment_id], key=lambda f: f.distance_seconds)
            claims[payment_id] = list(
                dict.fromkeys(f.purchase.id for f in ordered if f.purchase is not None)
            )
            card_of.update((f.purchase.id, f.card.id) for f in ordered if f.purchase is not None)
        return claims, claimants, card_of

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
        reason: dict[str, Any] = {"why": why, "detail": detail, "checked_at": iso_utc(self.now)}
        if fits:
            reason["candidates"] = [fit_json(f) for f in fits]
        if settle_at is not None:
            reason["settle_at"] = iso_utc(settle_at)
        if rivals:
            reason["rival_receipt_ids"] = rivals
        record.reason = reason

    def _cards_with_pan(self, record: CardPaymentRecord) -> int:
        """How many enrolled cards, of any partner of the receipt's kind (sandbox or not), agree
        with the masked PAN the receipt shows (it shows the first six: only asked for a pilot
        fit)."""
        shown = shown_pan(record)
        if shown is None or not shows_pilot_digits(shown):
            return 0
        cards = self.session.scalars(
            select(Card).where(
                Card.pan_last4 == shown.last4,
                Card.pan_first6 == shown.leading[:6],
                Card.deleted_at.is_(None),
                Card.sandbox.is_(record.sandbox),
            )
        )
        return sum(1 for card in cards if pan.agree(card_pan(card), shown))

    def _match(
        self, record: CardPaymentRecord, chosen: Fit, fits: list[Fit], *, delivered: str
    ) -> None:
        card = chosen.card
        record.status = PaymentStatus.MATCHED.value
        record.settle_at = None
        explanation = fit_json(chosen)
        explanation["delivered"] = delivered
        explanation["fits_considered"] = len(fits)
        explanation["paid_at"] = iso_utc(record.paid_at)
        if chosen.purchase is not None:
            chosen.purchase.payment_id = record.id
            explanation["purchase_transaction_ids"] = sorted(
                str(t.id) for t in self.purchase_transactions(chosen.purchase.id)
            )
        record.reason = {"why": "matched", "checked_at": iso_utc(self.now)}
        match = CardMatch(
            id=new_id(),
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
        strength = (
            "masked_pan" if chosen.purchase is None else ("code" if chosen.strong else "keys")
        )
        CARD_MATCHES.labels(strength).inc()
        deliver_match(self.session, self.settings, record, chosen, now=self.now)
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

    # the deferred re-check --------------------------------------------------------------------

    def settle_due(
        self, merchant_id: str, queued: Sequence[uuid.UUID] = (), *, limit: int = SETTLE_BATCH
    ) -> int:
        """Decide this merchant id's payments whose auth window has closed, and those of the
        ``queued`` payment ids that are still in ``CardMatchingQueue`` (lock held): their entries
        are deleted. Returns how many payments were decided."""
        new: list[CardPaymentRecord] = []
        if queued:
            taken = self.session.scalars(
                select(CardPaymentRecord)
                .join(CardMatchingQueue, CardMatchingQueue.payment_id == CardPaymentRecord.id)
                .where(CardMatchingQueue.payment_id.in_(queued))
            ).all()
            # An entry is deleted with the payment's first decision, so each is pending; any
            # other is only taken off the queue.
            new = [record for record in taken if _pending(record)]
            self._dequeued.update(record.id for record in taken)
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
        for record in new + due:
            self.evaluate(record)
        self.run()
        return len(new) + len(due)


def _pending(record: CardPaymentRecord) -> bool:
    """Recorded with its receipt and not decided since: queued for the worker."""
    return record.status == PaymentStatus.WAITING and record.reason.get("why") == "pending"


def _dequeue(session: Session, payment_ids: set[uuid.UUID]) -> None:
    session.execute(
        delete(CardMatchingQueue).where(CardMatchingQueue.payment_id.in_(payment_ids)),
        execution_options={"synchronize_session": False},
    )


def expire(record: CardPaymentRecord, now: datetime) -> None:
    """The payment left the matching set unmatched (7 days after its time)."""
    last_reason = record.reason
    record.status = PaymentStatus.EXPIRED.value
    record.settle_at = None
    record.updated_at = now
    record.reason = {
        "why": "expired",
        "detail": "Unmatched 7 days after the payment time: it left the matching set.",
        "last_reason": last_reason,
        "checked_at": iso_utc(now),
    }


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
    queued = {record.id for record in stale if _pending(record)}
    for record in stale:
        expire(record, now)
    if queued:
        _dequeue(session, queued)
    return len(stale)
