"""The card-linking fit rules on rows held in memory: no database, no server."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kuitti.cards import rules
from kuitti.cards.rules import Verdict
from kuitti.models import Card
from kuitti.models.cards import CardPaymentRecord, CardPurchase, CardTransaction

PAID_AT = datetime(2026, 1, 15, 12, 3, 11, tzinfo=UTC)
MID = "MID-000123"


def card(masked_pan: str = "415301******1234", *, pilot: bool = False) -> Card:
    return Card(
        id=uuid.uuid4(),
        partner_id=uuid.uuid4(),
        partner_card_id=f"card-{uuid.uuid4().hex[:6]}",
        masked_pan=masked_pan,
        pan_first6=masked_pan[:6],
        pan_last4=masked_pan[-4:],
        exp_date=PAID_AT + timedelta(days=900),
        holder_name=None,
        user_id=None,
        pilot=pilot,
        created_at=PAID_AT,
        deleted_at=None,
    )


def payment(**overrides: Any) -> CardPaymentRecord:
    values: dict[str, Any] = {
        "id": uuid.uuid4(),
        "receipt_id": uuid.uuid4(),
        "payment_index": 0,
        "status": "waiting",
        "merchant_id": MID,
        "amount": 849,
        "pre_authorized_amount": None,
        "currency": "EUR",
        "paid_at": PAID_AT,
        "masked_pan": "415301******1234",
        "pan_last4": "1234",
        "authorization_code": None,
        "reference_number": None,
        "settle_at": None,
        "reason": {},
        "created_at": PAID_AT,
        "updated_at": PAID_AT,
    }
    values.update(overrides)
    return CardPaymentRecord(**values)


def purchase_of(
    owner: Card,
    *,
    kind: str = "auth",
    at: datetime = PAID_AT,
    amount: int = 849,
    authorization_code: str | None = None,
    reference_number: str | None = None,
    currency: str = "EUR",
) -> tuple[CardPurchase, CardTransaction]:
    purchase = CardPurchase(
        id=uuid.uuid4(),
        card_id=owner.id,
        merchant_id=MID,
        merchant_name="Kauppa",
        authorization_code=authorization_code,
        reference_number=reference_number,
        payment_id=None,
        created_at=at,
    )
    txn = CardTransaction(
        id=uuid.uuid4(),
        card_id=owner.id,
        purchase_id=purchase.id,
        transaction_type=kind,
        amount=amount,
        currency=currency,
        occurred_at=at,
        merchant_id=MID,
        merchant_name="Kauppa",
        reference_number=reference_number,
        authorization_code=authorization_code,
        pan_last4=owner.pan_last4,
        created_at=at,
    )
    return purchase, txn


def fits(record: CardPaymentRecord, owner: Card, **txn: Any) -> rules.Fit | None:
    purchase, transaction = purchase_of(owner, **txn)
    return rules.fit(record, owner, purchase, transaction)


class TestFit:
    def test_equal_keys_fit_on_keys_alone(self) -> None:
        found = fits(payment(), card())
        assert found is not None
        assert found.keys == ["merchant_id", "currency", "amount", "time", "masked_pan"]
        assert not found.strong

    def test_an_equal_authorization_code_makes_the_fit_strong(self) -> None:
        found = fits(payment(authorization_code="A1"), card(), authorization_code="A1")
        assert found is not None
        assert found.strong
        assert "authorization_code" in found.keys

    @pytest.mark.parametrize(
        ("record", "txn"),
        [
            ({"authorization_code": "A1"}, {"authorization_code": "B2"}),
            ({"reference_number": "1"}, {"reference_number": "2"}),
            ({}, {"amount": 850}),
            ({}, {"currency": "SEK"}),
            ({"masked_pan": "************9999", "pan_last4": "9999"}, {}),
            ({"merchant_id": "OTHER"}, {}),
        ],
    )
    def test_any_differing_key_rules_the_purchase_out(
        self, record: dict[str, Any], txn: dict[str, Any]
    ) -> None:
        assert fits(payment(**record), card(), **txn) is None

    def test_an_auth_may_equal_the_pre_authorized_amount_a_clearing_may_not(self) -> None:
        record = payment(amount=4210, pre_authorized_amount=10000)
        auth = fits(record, card(), amount=10000)
        assert auth is not None
        assert "pre_authorized_amount" in auth.keys
        assert fits(record, card(), kind="clearing", amount=10000) is None

    def test_a_deleted_card_never_fits(self) -> None:
        gone = card()
        gone.deleted_at = PAID_AT
        assert fits(payment(), gone) is None


class TestWindows:
    @pytest.mark.parametrize(
        ("offset", "inside"),
        [
            (timedelta(minutes=-15), True),
            (timedelta(minutes=15), True),
            (timedelta(minutes=-15, seconds=-1), False),
            (timedelta(minutes=15, seconds=1), False),
        ],
    )
    def test_auth_within_15_minutes_either_way(self, offset: timedelta, inside: bool) -> None:
        assert rules.in_window("auth", PAID_AT, PAID_AT + offset) is inside
        assert (fits(payment(), card(), at=PAID_AT + offset) is not None) is inside

    @pytest.mark.parametrize(
        ("offset", "inside"),
        [
            (timedelta(minutes=-15), True),  # the issuer's clock a little ahead of the POS
            (timedelta(0), True),  # stamped with the purchase time
            (timedelta(hours=8), True),  # stamped when it cleared
            (timedelta(days=3, hours=12), True),
            (timedelta(days=7), True),
            (timedelta(minutes=-15, seconds=-1), False),
            (timedelta(days=7, seconds=1), False),
            (timedelta(days=-3), False),  # a clearing never precedes its purchase by days
        ],
    )
    def test_clearing_from_15_minutes_before_to_7_days_after(
        self, offset: timedelta, inside: bool
    ) -> None:
        assert rules.in_window("clearing", PAID_AT, PAID_AT + offset) is inside
        found = fits(payment(), card(), kind="clearing", at=PAID_AT + offset)
        assert (found is not None) is inside

    def test_the_lookup_ranges_cover_both_windows(self) -> None:
        earliest, latest = rules.transaction_times(PAID_AT)
        assert earliest == PAID_AT - timedelta(minutes=15)
        assert latest == PAID_AT + timedelta(days=7)
        cleared = PAID_AT + timedelta(days=2)
        assert rules.payment_times("clearing", cleared) == (
            cleared - timedelta(days=7),
            cleared + timedelta(minutes=15),
        )


class TestPilot:
    def test_a_pilot_card_fits_on_the_first_six_and_last_four(self) -> None:
        found = rules.pilot_fit(payment(), card(pilot=True))
        assert found is not None
        assert found.kind == "masked_pan_only"
        assert not found.strong

    def test_the_last_four_alone_are_not_enough(self) -> None:
        assert rules.pilot_fit(payment(masked_pan="************1234"), card(pilot=True)) is None

    def test_an_ordinary_card_never_fits_on_the_masked_pan(self) -> None:
        assert rules.pilot_fit(payment(), card()) is None


class TestServeAll:
    def test_each_claimant_gets_its_own_purchase(self) -> None:
        # A daily coffee cleared days later: Monday's payment fits every clearing so far,
        # Wednesday's only Wednesday's clearing. Wednesday's must take its own.
        claims = {"mon": ["c-wed", "c-mon", "c-tue"], "tue": ["c-wed", "c-tue"], "wed": ["c-wed"]}
        assert rules.serve_all(claims) == {"mon": "c-mon", "tue": "c-tue", "wed": "c-wed"}

    def test_more_claimants_than_purchases_serves_none(self) -> None:
        assert rules.serve_all({"a": ["x"], "b": ["x"]}) is None
        assert rules.serve_all({"a": ["x", "y"], "b": ["x", "y"], "c": ["y", "x"]}) is None

    def test_the_preferred_purchase_when_nobody_needs_it(self) -> None:
        assert rules.serve_all({"a": ["near", "far"]}) == {"a": "near"}


class TestJudge:
    def test_nothing_fits(self) -> None:
        assert (
            rules.judge([], PAID_AT, PAID_AT, cards_with_this_pan=1).verdict is Verdict.NO_CANDIDATE
        )

    def test_two_cards_tie(self) -> None:
        record = payment(masked_pan="************1234")
        found = [fits(record, card()), fits(record, card("552211******1234"))]
        assert (
            rules.judge([f for f in found if f], PAID_AT, PAID_AT, cards_with_this_pan=1).verdict
            is Verdict.TIED
        )

    def test_a_strong_fit_is_delivered_at_once(self) -> None:
        owner = card()
        record = payment(authorization_code="A1")
        weak = fits(record, owner, at=PAID_AT + timedelta(minutes=1))
        strong = fits(record, owner, authorization_code="A1")
        assert weak is not None
        assert strong is not None
        judged = rules.judge([weak, strong], PAID_AT, PAID_AT, cards_with_this_pan=1)
        assert judged.verdict is Verdict.AT_ONCE
        assert rules.best(judged.card_fits) is strong

    def test_a_weak_fit_waits_for_the_auth_window_to_close(self) -> None:
        found = fits(payment(), card())
        assert found is not None
        waiting = rules.judge(
            [found], PAID_AT, PAID_AT + timedelta(minutes=14), cards_with_this_pan=1
        )
        assert waiting.verdict is Verdict.AWAITING_WINDOW
        assert waiting.settle_at == PAID_AT + timedelta(minutes=15)
        closed = rules.judge(
            [found], PAID_AT, PAID_AT + timedelta(minutes=15), cards_with_this_pan=1
        )
        assert closed.verdict is Verdict.WEAK

    def test_the_nearest_transaction_is_the_best_fit(self) -> None:
        owner = card()
        record = payment()
        far = fits(record, owner, at=PAID_AT - timedelta(minutes=10))
        near = fits(record, owner, at=PAID_AT + timedelta(minutes=2))
        assert far is not None
        assert near is not None
        assert rules.best([far, near]) is near

    def test_a_pilot_card_alone_with_its_masked_pan_is_delivered_at_once(self) -> None:
        found = rules.pilot_fit(payment(), card(pilot=True))
        assert found is not None
        judged = rules.judge([found], PAID_AT, PAID_AT, cards_with_this_pan=1)
        assert judged.verdict is Verdict.PILOT_AT_ONCE

    def test_a_pilot_card_waits_when_another_enrolled_card_agrees(self) -> None:
        found = rules.pilot_fit(payment(), card(pilot=True))
        assert found is not None
        judged = rules.judge([found], PAID_AT, PAID_AT, cards_with_this_pan=2)
        assert judged.verdict is Verdict.AWAITING_WINDOW
