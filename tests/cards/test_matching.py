"""The matching rules, each through the HTTP API, in both orders of arrival."""

from __future__ import annotations

from datetime import timedelta

from tests.cards.support import AUTH_CODE, PAID_AT, REFERENCE, World
from tests.factories import receipt_doc


class TestStrongFit:
    def test_receipt_first_waits_then_the_transaction_delivers_it(self, world: World) -> None:
        card = world.enroll()
        receipt = world.receipt()
        assert world.owners(receipt) == set()
        assert world.why(receipt) == "no_candidate"
        answer = world.transaction(authorization_code=AUTH_CODE)
        assert answer["matched_receipt_id"] == receipt
        assert world.owners(receipt) == {world.user.id}
        assert world.issuer.partner.id in world.readers(receipt)
        assert world.matched_card(receipt) == card

    def test_transaction_first_delivers_at_ingest(self, world: World) -> None:
        card = world.enroll()
        world.transaction(reference_number=REFERENCE)
        receipt = world.receipt()
        assert world.owners(receipt) == {world.user.id}
        explanation = world.explain(receipt)["card_payments"][0]["match"]
        assert explanation["service_card_id"] == card
        assert "reference_number" in explanation["keys"]
        assert explanation["delivered"].startswith("at once")

    def test_a_different_authorization_code_never_fits(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code="ZZZZZZ")
        receipt = world.receipt()
        world.later(hours=1)
        world.settle()
        assert world.owners(receipt) == set()
        assert world.why(receipt) == "no_candidate"

    def test_a_different_merchant_id_or_amount_never_fits(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE, merchant_id="MID-999")
        world.transaction(authorization_code=AUTH_CODE, amount=850)
        receipt = world.receipt()
        assert world.owners(receipt) == set()

    def test_the_masked_pan_must_agree(self, world: World) -> None:
        world.enroll(masked_pan="415301******9999")
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt()
        assert world.owners(receipt) == set()

    def test_a_receipt_showing_only_the_last_four_fits(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(maskedPAN="************1234")
        assert world.owners(receipt) == {world.user.id}

    def test_the_first_six_must_agree_when_the_receipt_shows_them(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(maskedPAN="552211******1234")
        assert world.owners(receipt) == set()


class TestWeakFit:
    """A fit without an equal authorization code or reference number waits for the auth window
    to close (15 min after the payment time) and is delivered only if still the only one."""

    def test_delivered_once_the_auth_window_has_closed(self, world: World) -> None:
        world.enroll()
        world.transaction()  # no codes
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        assert world.why(receipt) == "awaiting_window"
        world.clock.set(PAID_AT + timedelta(minutes=15) - timedelta(seconds=1))
        world.settle()
        assert world.owners(receipt) == set()
        world.clock.set(PAID_AT + timedelta(minutes=15))
        world.settle()
        assert world.owners(receipt) == {world.user.id}
        match = world.explain(receipt)["card_payments"][0]["match"]
        assert match["delivered"].startswith("after the auth window closed")
        assert match["strong"] is False

    def test_a_late_receipt_with_a_weak_fit_is_delivered_at_once(self, world: World) -> None:
        world.enroll()
        world.transaction()
        world.clock.set(PAID_AT + timedelta(hours=2))
        receipt = world.receipt(authorizationCode=None, referenceNumber=None)
        assert world.owners(receipt) == {world.user.id}

    def test_the_next_arrival_at_the_same_merchant_settles_due_payments(self, world: World) -> None:
        world.enroll()
        world.enroll("card-2", "415301******5678")
        world.transaction()
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        world.clock.set(PAID_AT + timedelta(minutes=20))
        world.transaction("card-2", at=PAID_AT + timedelta(minutes=19), amount=100)
        assert world.owners(receipt) == {world.user.id}

    def test_two_payments_contesting_one_purchase_both_wait(self, world: World) -> None:
        world.enroll()
        world.transaction()
        world.clock.set(PAID_AT)
        first = world.receipt(authorizationCode=None, referenceNumber=None)
        second = world.receipt(authorizationCode=None, referenceNumber=None)
        world.clock.set(PAID_AT + timedelta(minutes=30))
        world.settle()
        assert world.owners(first) == set()
        assert world.owners(second) == set()
        assert world.why(first) == "contested"
        # A second purchase of the same card explains both receipts.
        world.transaction(at=PAID_AT + timedelta(minutes=1))
        assert world.owners(first) == {world.user.id}
        assert world.owners(second) == {world.user.id}
        assert len({m.purchase_id for m in world.matches()}) == 2

    def test_a_contest_ends_when_the_rival_is_matched_elsewhere(self, world: World) -> None:
        world.enroll()
        world.transaction()
        world.clock.set(PAID_AT)
        first = world.receipt(authorizationCode=None, referenceNumber=None)
        rival = world.receipt(authorizationCode="R1V4L", referenceNumber=None)
        world.clock.set(PAID_AT + timedelta(minutes=30))
        world.settle()
        assert world.why(first) == "contested"
        # The rival's own purchase arrives with its code: it is matched there, and the first
        # receipt is then the only claimant of the first purchase.
        world.transaction(at=PAID_AT + timedelta(minutes=2), authorization_code="R1V4L")
        assert world.owners(rival) == {world.user.id}
        assert world.owners(first) == {world.user.id}


class TestWindows:
    def test_auth_window_bounds_are_inclusive(self, world: World) -> None:
        world.enroll()
        world.transaction(at=PAID_AT - timedelta(minutes=15), authorization_code=AUTH_CODE)
        inside = world.receipt()
        assert world.owners(inside) == {world.user.id}

    def test_auth_window_after_bound_is_inclusive(self, world: World) -> None:
        world.enroll()
        world.transaction(at=PAID_AT + timedelta(minutes=15), authorization_code=AUTH_CODE)
        assert world.owners(world.receipt()) == {world.user.id}

    def test_just_outside_the_auth_window_does_not_fit(self, world: World) -> None:
        world.enroll()
        world.transaction(
            at=PAID_AT - timedelta(minutes=15, seconds=1), authorization_code=AUTH_CODE
        )
        world.transaction(
            at=PAID_AT + timedelta(minutes=15, seconds=1), authorization_code=AUTH_CODE
        )
        assert world.owners(world.receipt()) == set()

    def test_a_clearing_stamped_days_after_the_payment_delivers_the_waiting_receipt(
        self, world: World
    ) -> None:
        # Issuers stamp a clearing when it clears: here three and a half days after the
        # purchase, with no auth before it and no codes on either side.
        world.enroll()
        world.clock.set(PAID_AT)
        receipt = world.receipt(authorizationCode=None, referenceNumber=None)
        world.later(days=3, hours=12)
        world.transaction(kind="clearing", at=PAID_AT + timedelta(days=3, hours=12))
        assert world.owners(receipt) == {world.user.id}
        match = world.explain(receipt)["card_payments"][0]["match"]
        assert match["window"] == "clearing (15 min before to 7 days after the payment)"

    def test_clearing_window_bounds_are_inclusive(self, world: World) -> None:
        world.enroll()
        world.transaction(
            kind="clearing", at=PAID_AT - timedelta(minutes=15), authorization_code=AUTH_CODE
        )
        assert world.owners(world.receipt()) == {world.user.id}
        world.clock.set(PAID_AT)
        late = world.receipt(authorizationCode="LATE01")
        world.clock.set(PAID_AT + timedelta(days=7))
        world.transaction(
            kind="clearing", at=PAID_AT + timedelta(days=7), authorization_code="LATE01"
        )
        assert world.owners(late) == {world.user.id}

    def test_just_outside_the_clearing_window_does_not_fit(self, world: World) -> None:
        world.enroll()
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        world.transaction(
            kind="clearing",
            at=PAID_AT - timedelta(minutes=15, seconds=1),
            authorization_code=AUTH_CODE,
        )
        world.clock.set(PAID_AT + timedelta(days=7))
        world.transaction(
            kind="clearing",
            at=PAID_AT + timedelta(days=7, seconds=1),
            authorization_code=AUTH_CODE,
        )
        assert world.owners(receipt) == set()

    def test_a_clearing_days_before_the_payment_does_not_fit(self, world: World) -> None:
        world.enroll()
        world.clock.set(PAID_AT - timedelta(days=3))
        world.transaction(
            kind="clearing", at=PAID_AT - timedelta(days=3), authorization_code=AUTH_CODE
        )
        world.clock.set(PAID_AT)
        assert world.owners(world.receipt()) == set()

    def test_payment_time_falls_back_to_the_receipt_time(self, world: World) -> None:
        receipt_time = PAID_AT - timedelta(seconds=11)  # receiptTimeStamp 12:03:00Z
        world.enroll()
        # 15 min 5 s after the receipt time but 14 min 54 s after the payment's timeStamp.
        world.transaction(
            at=receipt_time + timedelta(minutes=15, seconds=5), authorization_code=AUTH_CODE
        )
        without_stamp = world.receipt(timeStamp=None)
        assert world.owners(without_stamp) == set()
        with_stamp = world.receipt()
        assert world.owners(with_stamp) == {world.user.id}
        # 14 min 55 s before the receipt time, 15 min 6 s before the payment's timeStamp.
        world.transaction(
            at=receipt_time - timedelta(minutes=14, seconds=55), authorization_code="OTHER1"
        )
        assert world.owners(world.receipt(authorizationCode="OTHER1")) == set()
        assert world.owners(world.receipt(authorizationCode="OTHER1", timeStamp=None)) == {
            world.user.id
        }


class TestUnmatchable:
    def test_a_payment_without_mid_is_recorded_as_unmatchable(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(MID=None)
        [payment] = world.explain(receipt)["card_payments"]
        assert payment["status"] == "unmatchable"
        assert "MID" in payment["reason"]["detail"]
        assert world.owners(receipt) == set()

    def test_a_masked_pan_without_last_four_is_unmatchable(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(maskedPAN="415301**********")
        assert world.explain(receipt)["card_payments"][0]["status"] == "unmatchable"

    def test_a_receipt_without_card_payments_has_nothing_to_match(self, world: World) -> None:

        doc = receipt_doc(payments=[{"type": "CASH", "amount": 849}])
        receipt = world.receipt(doc)
        assert world.explain(receipt)["card_payments"] == []

    def test_another_currency_never_fits(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE, currency="SEK")
        assert world.owners(world.receipt()) == set()
