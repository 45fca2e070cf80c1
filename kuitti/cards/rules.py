"""The card-linking fit rules, without a database: when a receipt's CARD payment fits one
transaction of an enrolled card's purchase, and what a payment's set of fits decides.

Everything here works on rows held in memory (a payment record, a card, a purchase and its
transaction), so the rules can be read and tested on their own; ``kuitti.cards.matching`` finds
the rows and carries the decisions out. ``docs/matching.md`` tells the rules with examples.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Any, TypeVar

from kuitti import pan
from kuitti.clock import iso_utc
from kuitti.models import Card
from kuitti.models.cards import CardPaymentRecord, CardPurchase, CardTransaction, TransactionType

AUTH_WINDOW = timedelta(minutes=15)
CLEARING_BEFORE = timedelta(minutes=15)
CLEARING_AFTER = timedelta(days=7)
MATCHING_SET_LIFETIME = timedelta(days=7)
"""Unmatched payments and transactions leave the matching set this long after their time."""

K = TypeVar("K")
P = TypeVar("P")
C = TypeVar("C")


# -- windows -----------------------------------------------------------------------------------


def in_window(kind: TransactionType | str, paid_at: datetime, occurred_at: datetime) -> bool:
    """Whether a transaction of this kind, stamped ``occurred_at``, fits a payment made at
    ``paid_at`` (bounds inclusive)."""
    offset = occurred_at - paid_at
    if kind == TransactionType.AUTH:
        return abs(offset) <= AUTH_WINDOW
    # Issuers stamp a clearing when it clears, hours to days after the purchase (some with the
    # purchase time itself); never much before it.
    return -CLEARING_BEFORE <= offset <= CLEARING_AFTER


def transaction_times(paid_at: datetime) -> tuple[datetime, datetime]:
    """The earliest and latest time of any transaction (auth or clearing) that can fit a
    payment made at ``paid_at``."""
    return paid_at - max(AUTH_WINDOW, CLEARING_BEFORE), paid_at + CLEARING_AFTER


def payment_times(kind: TransactionType | str, occurred_at: datetime) -> tuple[datetime, datetime]:
    """The earliest and latest payment time that a transaction of this kind can fit."""
    if kind == TransactionType.AUTH:
        return occurred_at - AUTH_WINDOW, occurred_at + AUTH_WINDOW
    return occurred_at - CLEARING_AFTER, occurred_at + CLEARING_BEFORE


def window_name(kind: TransactionType | str) -> str:
    if kind == TransactionType.AUTH:
        return "auth (±15 min)"
    return "clearing (15 min before to 7 days after the payment)"


# -- fits --------------------------------------------------------------------------------------


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


def card_pan(card: Card) -> pan.MaskedPan:
    return pan.of_card(card.masked_pan, card.pan_first6, card.pan_last4)


def shown_pan(record: CardPaymentRecord) -> pan.MaskedPan | None:
    return pan.parse_shown(record.masked_pan) if record.masked_pan else None


def fit(
    record: CardPaymentRecord,
    card: Card,
    purchase: CardPurchase,
    txn: CardTransaction,
    auth_at: datetime | None = None,
) -> Fit | None:
    """Whether the payment fits this transaction of this purchase, and on which keys.

    ``auth_at``: the time of the purchase's auth, when it has one. It anchors the purchase in
    time: a payment that fits only the purchase's clearing (a tip, fuel, a code-less receipt)
    must still lie within the auth window of the auth. Without it, a stranger's receipt from
    days before could take a clearing whose own receipt is still on its way.

    A sandbox receipt's payment and a real card never fit, nor the reverse (docs/sandbox.md):
    not even as rivals, so a test can never hold up a real match."""
    if card.deleted_at is not None or txn.merchant_id != record.merchant_id:
        return None
    if bool(card.sandbox) != bool(record.sandbox):  # None: an object not yet stored
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
    if not in_window(txn.transaction_type, record.paid_at, txn.occurred_at):
        return None
    if auth_at is not None and not in_window(TransactionType.AUTH, record.paid_at, auth_at):
        return None
    keys.append("time")
    shown = shown_pan(record)
    if shown is None or not pan.agree(card_pan(card), shown):
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
    distance = abs((record.paid_at - txn.occurred_at).total_seconds())
    return Fit(card, purchase, txn, keys, window_name(txn.transaction_type), strong, distance)


def shows_pilot_digits(shown: pan.MaskedPan | None) -> bool:
    """A receipt's masked PAN shows enough for a pilot card: the first six and last four."""
    return shown is not None and len(shown.leading) >= 6 and shown.last4 is not None


def pilot_fit(record: CardPaymentRecord, card: Card) -> Fit | None:
    """A pilot card fits on the masked PAN alone when the receipt shows its first six and last
    four digits and they agree."""
    shown = shown_pan(record)
    if not card.pilot or card.deleted_at is not None or not shows_pilot_digits(shown):
        return None
    if bool(card.sandbox) != bool(record.sandbox):  # None: an object not yet stored
        return None
    assert shown is not None
    if not pan.agree(card_pan(card), shown):
        return None
    return Fit(card, None, None, ["masked_pan (pilot card)"], "none", strong=False)


def best(fits: list[Fit]) -> Fit:
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


def fit_json(item: Fit) -> dict[str, Any]:
    """A fit as ``kuitti receipts explain`` shows it."""
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
        out["transaction_time"] = iso_utc(item.transaction.occurred_at)
    if item.purchase is not None:
        out["purchase_id"] = str(item.purchase.id)
    return out


# -- what a payment's fits decide --------------------------------------------------------------


class Verdict(StrEnum):
    NO_CANDIDATE = "no_candidate"
    TIED = "tied"
    AT_ONCE = "at_once"  # a strong fit on the one fitting card
    PILOT_AT_ONCE = "pilot_at_once"  # a pilot card, the only enrolled card with this masked PAN
    AWAITING_WINDOW = "awaiting_window"
    WEAK = "weak"  # the only card on keys alone, auth window closed: count the claimants


@dataclass(frozen=True)
class Judgement:
    verdict: Verdict
    card_fits: list[Fit]  # the one fitting card's fits (empty unless one card fits)
    settle_at: datetime | None = None


def judge(
    fits: list[Fit], paid_at: datetime, now: datetime, *, cards_with_this_pan: int
) -> Judgement:
    """What a waiting payment's fits decide, before counting rival payments: nothing fits, a
    tie between cards, one card with a strong fit (delivered at once), a pilot card that is the
    only enrolled card of any partner agreeing with the receipt's masked PAN (delivered at once:
    the pilot banks are promised receipts in real time), or one card on keys alone (waits for
    the auth window to close, then for the rival count).

    ``cards_with_this_pan``: how many enrolled cards, of any partner, agree with the masked PAN
    the receipt shows (only consulted for a pilot fit, whose fits show the first six)."""
    by_card: dict[object, list[Fit]] = {}
    for item in fits:
        by_card.setdefault(item.card.id, []).append(item)
    if not by_card:
        return Judgement(Verdict.NO_CANDIDATE, [])
    if len(by_card) > 1:
        return Judgement(Verdict.TIED, [])
    card_fits = next(iter(by_card.values()))
    if any(f.strong for f in card_fits):
        return Judgement(Verdict.AT_ONCE, [f for f in card_fits if f.strong])
    if cards_with_this_pan == 1 and all(f.purchase is None for f in card_fits):
        return Judgement(Verdict.PILOT_AT_ONCE, card_fits)
    settle_at = paid_at + AUTH_WINDOW
    if now < settle_at:
        return Judgement(Verdict.AWAITING_WINDOW, card_fits, settle_at)
    return Judgement(Verdict.WEAK, card_fits)


def serve_all(claims: dict[K, list[P]]) -> dict[K, P] | None:
    """An assignment giving every claimant its own purchase from those it claims (claims in
    order of preference), or None when there is none (Hall's condition fails: more claimants
    than purchases in some group). Kuhn's augmenting paths; the groups are small."""
    owner: dict[P, K] = {}

    def place(claimant: K, seen: set[P]) -> bool:
        for purchase in claims[claimant]:
            if purchase in seen:
                continue
            seen.add(purchase)
            holder = owner.get(purchase)
            if holder is None or place(holder, seen):
                owner[purchase] = claimant
                return True
        return False

    for claimant in claims:
        if not place(claimant, set()):
            return None
    return {claimant: purchase for purchase, claimant in owner.items()}


class Outcome(StrEnum):
    UNSERVED = "contested"  # no way gives every claimant its own purchase
    TIED = "tied"  # the subject could be served by more than one card
    WON = "won"  # every way of serving all claimants gives the subject this card


def contest(subject: K, claims: dict[K, list[P]], card_of: dict[P, C]) -> tuple[Outcome, P | None]:
    """Decide one payment among the waiting payments that claim the same purchases on keys alone
    (``claims``: each claimant's purchases, preferred first; ``card_of``: each purchase's card).

    A purchase serves one payment, and every claimant is taken to be a real payment of one of
    these purchases. The subject wins a card when some way serves every claimant and every such
    way gives the subject a purchase of that same card; it then gets its purchase in one such
    way. Ties on which purchase of the one card don't matter to whom the receipt goes."""
    cards = list(dict.fromkeys(card_of[p] for p in claims[subject]))
    won: list[P] = []
    for card in cards:
        restricted = {subject: [p for p in claims[subject] if card_of[p] == card]}
        restricted.update((k, v) for k, v in claims.items() if k != subject)
        assignment = serve_all(restricted)
        if assignment is not None:
            won.append(assignment[subject])
    if not won:
        return Outcome.UNSERVED, None
    if len(won) > 1:
        return Outcome.TIED, None
    return Outcome.WON, won[0]
