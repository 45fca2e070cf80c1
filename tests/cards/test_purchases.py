"""Purchases (auth + clearing), pre-authorised amounts, ties, pilot cards, split tender,
refunds and expiry from the matching set — through the HTTP API."""

from __future__ import annotations

from datetime import datetime, timedelta

from tests.cards.support import AUTH_CODE, PAID_AT, PAN, World, iso, two_card_payments
from tests.factories import card_payment, make_user, product_row, receipt_doc


class TestOnePurchase:
    def test_auth_and_its_clearing_are_one_purchase(self, world: World) -> None:
        world.enroll()
        auth = world.transaction(authorization_code=AUTH_CODE)
        first = world.receipt()
        clearing = world.transaction(
            kind="clearing", at=PAID_AT + timedelta(days=1), authorization_code=AUTH_CODE
        )
        assert clearing["purchase_id"] == auth["purchase_id"]
        assert clearing["matched_receipt_id"] == first
        # The same receipt posted again finds no free purchase: never two receipts.
        second = world.receipt()
        world.later(days=2)
        world.settle()
        assert world.owners(first) == {world.user.id}
        assert world.owners(second) == set()
        assert len(world.matches()) == 1
        assert len(world.webhooks("receipt_notification")) == 1

    def test_clearing_with_a_tip_joins_its_auth_and_matches_the_receipt_total(
        self, world: World
    ) -> None:
        world.enroll()
        auth = world.transaction(amount=749, authorization_code=AUTH_CODE)
        # The clearing arrives the next day; its timestamp is the transaction's time.
        world.clock.set(PAID_AT + timedelta(hours=20))
        clearing = world.transaction(kind="clearing", amount=849, at=PAID_AT + timedelta(minutes=2))
        assert clearing["purchase_id"] == auth["purchase_id"]
        world.clock.set(PAID_AT + timedelta(hours=21))
        receipt = world.receipt()  # 849 incl. tip, code A1B2C3 equal to the purchase's
        assert world.owners(receipt) == {world.user.id}
        match = world.explain(receipt)["card_payments"][0]["match"]
        assert match["transaction_type"] == "clearing"
        assert "authorization_code" in match["keys"]

    def test_a_clearing_with_another_code_is_another_purchase(self, world: World) -> None:
        world.enroll()
        auth = world.transaction(authorization_code=AUTH_CODE)
        clearing = world.transaction(kind="clearing", authorization_code="XYZ999")
        assert clearing["purchase_id"] != auth["purchase_id"]

    def test_a_codeless_clearing_joins_the_earliest_of_equal_open_auths(self, world: World) -> None:
        """A daily regular: two open auths of the same amount, then a clearing with no codes.
        It continues one of them, never a phantom third purchase a stranger could take."""
        world.enroll()
        monday = world.transaction(at=PAID_AT)
        world.transaction(at=PAID_AT + timedelta(days=1))
        world.clock.set(PAID_AT + timedelta(days=2))
        clearing = world.transaction(kind="clearing", at=PAID_AT + timedelta(days=2))
        assert clearing["purchase_id"] == monday["purchase_id"]

    def test_a_retried_transaction_is_stored_once(self, world: World) -> None:
        world.enroll()
        first = world.transaction(authorization_code=AUTH_CODE)
        again = world.transaction(authorization_code=AUTH_CODE)
        assert again["transaction_id"] == first["transaction_id"]
        assert again["replayed"] is True


class TestPreAuthorizedAmount:
    def test_the_auth_may_equal_the_pre_authorized_amount(self, world: World) -> None:
        world.enroll()
        world.transaction(amount=10000, authorization_code=AUTH_CODE)
        receipt = world.receipt(preAuthorizedAmount=10000)
        assert world.owners(receipt) == {world.user.id}
        match = world.explain(receipt)["card_payments"][0]["match"]
        assert "pre_authorized_amount" in match["keys"]

    def test_without_it_a_different_auth_amount_does_not_fit(self, world: World) -> None:
        world.enroll()
        world.transaction(amount=10000, authorization_code=AUTH_CODE)
        receipt = world.receipt()
        assert world.owners(receipt) == set()

    def test_a_clearing_may_not_use_the_pre_authorized_amount(self, world: World) -> None:
        world.enroll()
        world.transaction(kind="clearing", amount=10000, authorization_code=AUTH_CODE)
        receipt = world.receipt(preAuthorizedAmount=10000)
        assert world.owners(receipt) == set()


class TestTies:
    def test_two_fitting_cards_wait_and_a_later_transaction_resolves(self, world: World) -> None:
        other_user = make_user(world.services, "matti@example.com")
        world.enroll("card-a")
        world.enroll("card-b", user=other_user)
        world.transaction("card-a", authorization_code=AUTH_CODE)
        b_auth = world.transaction("card-b")  # no code: cannot be told apart yet
        receipt = world.receipt()
        assert world.why(receipt) == "tied"
        reason = world.explain(receipt)["card_payments"][0]["reason"]
        assert len({c["service_card_id"] for c in reason["candidates"]}) == 2
        world.later(hours=1)
        world.settle()
        assert world.owners(receipt) == set()
        # Card B's clearing brings its authorization code, which differs: only A fits now.
        clearing = world.transaction(
            "card-b", kind="clearing", at=PAID_AT + timedelta(hours=1), authorization_code="B9"
        )
        assert clearing["purchase_id"] == b_auth["purchase_id"]
        assert world.owners(receipt) == {world.user.id}

    def test_a_tie_on_keys_alone_never_delivers(self, world: World) -> None:
        other_user = make_user(world.services, "matti@example.com")
        world.enroll("card-a")
        world.enroll("card-b", user=other_user)
        world.transaction("card-a")
        world.transaction("card-b")
        receipt = world.receipt(authorizationCode=None, referenceNumber=None)
        world.later(days=1)
        world.settle()
        assert world.owners(receipt) == set()
        assert world.why(receipt) == "tied"

    def test_a_tie_resolves_when_another_receipt_takes_one_purchase(self, world: World) -> None:
        other_user = make_user(world.services, "matti@example.com")
        world.enroll("card-a")
        world.enroll("card-b", user=other_user)
        world.transaction("card-a", authorization_code="A7")
        world.transaction("card-b", authorization_code="B9")
        world.clock.set(PAID_AT)
        waiting = world.receipt(authorizationCode=None, referenceNumber=None)
        assert world.why(waiting) == "tied"
        taker = world.receipt(authorizationCode="B9", referenceNumber=None)
        assert world.owners(taker) == {other_user.id}
        world.clock.set(PAID_AT + timedelta(minutes=15))
        world.settle()
        assert world.owners(waiting) == {world.user.id}


class TestClearedDaysLater:
    """Clearings stamped when they clear fit every payment of the past week: a daily coffee of
    the same amount at the same merchant makes several receipts fit several clearings."""

    def _coffee(self, world: World, day: int, masked_pan: str = PAN) -> str:
        world.clock.set(PAID_AT + timedelta(days=day))
        return world.receipt(
            timeStamp=iso(PAID_AT + timedelta(days=day)),
            maskedPAN=masked_pan,
            authorizationCode=None,
            referenceNumber=None,
        )

    def _clearing(self, world: World, card: str, at: datetime) -> None:
        world.clock.set(at)
        world.transaction(card, kind="clearing", at=at)

    def test_a_daily_coffee_goes_to_its_card_one_purchase_each(self, world: World) -> None:
        world.enroll()
        receipts = [self._coffee(world, day) for day in range(3)]
        # Tuesday's cleared first; Monday's and Wednesday's only on Thursday.
        self._clearing(world, "card-1", PAID_AT + timedelta(days=2, hours=2))
        assert {world.why(r) for r in receipts} == {"contested"}
        self._clearing(world, "card-1", PAID_AT + timedelta(days=3))
        assert all(world.owners(r) == set() for r in receipts)
        self._clearing(world, "card-1", PAID_AT + timedelta(days=3, hours=1))
        assert all(world.owners(r) == {world.user.id} for r in receipts)
        assert len({m.purchase_id for m in world.matches()}) == 3

    def test_a_tie_between_two_cards_resolves_to_the_right_one(self, world: World) -> None:
        other_user = make_user(world.services, "matti@example.com")
        world.enroll("card-a")
        world.enroll("card-b", "552211******1234", user=other_user)
        mine = self._coffee(world, 0, masked_pan="************1234")
        theirs = self._coffee(world, 1, masked_pan="552211******1234")
        # Card B's clearing fits both receipts (mine shows only the last four digits).
        self._clearing(world, "card-b", PAID_AT + timedelta(days=1, hours=2))
        assert world.owners(mine) == world.owners(theirs) == set()
        # Card A's clearing fits only mine: mine could be A's or B's, theirs only B's, and
        # giving each receipt its own purchase leaves one way.
        self._clearing(world, "card-a", PAID_AT + timedelta(days=1, hours=6))
        assert world.owners(theirs) == {other_user.id}
        assert world.owners(mine) == {world.user.id}

    def test_a_tie_nothing_can_tell_apart_waits(self, world: World) -> None:
        other_user = make_user(world.services, "matti@example.com")
        world.enroll("card-a")
        world.enroll("card-b", "552211******1234", user=other_user)
        first = self._coffee(world, 0, masked_pan="************1234")
        second = self._coffee(world, 1, masked_pan="************1234")
        self._clearing(world, "card-b", PAID_AT + timedelta(days=1, hours=2))
        self._clearing(world, "card-a", PAID_AT + timedelta(days=1, hours=6))
        world.later(days=1)
        world.settle()
        assert world.matches() == []
        assert {world.why(first), world.why(second)} == {"tied"}

    def test_a_purchase_with_an_auth_keeps_the_auths_time(self, world: World) -> None:
        """A stranger's receipt from the day before fits the clearing's window, but not the
        purchase's auth: it never takes the purchase while the card's own receipt is late."""
        world.enroll()
        strangers = self._coffee(world, 0)  # a card nobody enrolled, same masked PAN
        tuesday = PAID_AT + timedelta(days=1)
        world.clock.set(tuesday)
        world.transaction(at=tuesday)
        self._clearing(world, "card-1", tuesday + timedelta(hours=3))
        world.later(hours=1)
        world.settle()
        assert world.matches() == []
        mine = world.receipt(timeStamp=iso(tuesday), authorizationCode=None, referenceNumber=None)
        assert world.owners(mine) == {world.user.id}
        assert world.owners(strangers) == set()

    def test_a_stranger_with_the_same_masked_pan_makes_the_purchase_wait(
        self, world: World
    ) -> None:
        world.enroll()
        mine = self._coffee(world, 0)
        strangers = self._coffee(world, 1)  # a card nobody enrolled, same BIN and last four
        self._clearing(world, "card-1", PAID_AT + timedelta(days=1, hours=3))
        world.later(days=1)
        world.settle()
        assert world.matches() == []
        assert world.why(mine) == world.why(strangers) == "contested"


class TestPilotCards:
    def _pilot(self, world: World, masked_pan: str = "415301******1234") -> object:
        return world.pilot_bank(masked_pan)

    def test_masked_pan_alone_matches_a_pilot_card_at_once(self, world: World) -> None:
        bank = self._pilot(world)
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        # Real time: the matching step right after the commit, with no time passing.
        assert bank.partner.id in world.readers(receipt)  # type: ignore[attr-defined]
        match = world.explain(receipt)["card_payments"][0]["match"]
        assert match["kind"] == "masked_pan_only"
        assert match["delivered"].startswith("at once: a pilot card")
        assert len(world.webhooks("full_receipt_notification")) == 1

    def test_a_pilot_card_waits_when_another_enrolled_card_agrees(self, world: World) -> None:
        bank = self._pilot(world)
        world.enroll("card-9", "415301******1234")  # another issuer's card, same masked PAN
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        assert world.why(receipt) == "awaiting_window"
        assert world.webhooks("full_receipt_notification") == []
        world.later(minutes=15)
        world.settle()
        assert bank.partner.id in world.readers(receipt)  # type: ignore[attr-defined]
        assert len(world.webhooks("full_receipt_notification")) == 1

    def test_a_pilot_card_agreeing_only_on_the_last_four_does_not_count(self, world: World) -> None:
        bank = self._pilot(world)
        world.enroll("card-9", "552211******1234")  # agrees on the last four only
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        assert bank.partner.id in world.readers(receipt)  # type: ignore[attr-defined]

    def test_masked_pan_alone_never_matches_an_ordinary_card(self, world: World) -> None:
        world.enroll()
        receipt = world.receipt()
        world.later(days=1)
        world.settle()
        assert world.owners(receipt) == set()
        assert world.why(receipt) == "no_candidate"

    def test_pilot_needs_the_first_six_and_last_four_on_the_receipt(self, world: World) -> None:
        self._pilot(world)
        receipt = world.receipt(maskedPAN="************1234")
        world.later(days=1)
        world.settle()
        assert world.matches(receipt) == []


class TestSplitTender:
    def test_each_card_payment_is_matched_separately(self, world: World) -> None:
        other_user = make_user(world.services, "matti@example.com")
        world.enroll("card-a")
        world.enroll("card-b", "552211******9876", user=other_user)
        doc = two_card_payments(
            {"authorizationCode": "AAA111"},
            {"authorizationCode": "BBB222", "maskedPAN": "552211******9876"},
        )
        world.transaction("card-a", amount=500, authorization_code="AAA111")
        receipt = world.receipt(doc)
        assert world.owners(receipt) == {world.user.id}
        world.transaction("card-b", amount=349, authorization_code="BBB222")
        assert world.owners(receipt) == {world.user.id, other_user.id}
        explained = world.explain(receipt)["card_payments"]
        assert [p["status"] for p in explained] == ["matched", "matched"]


class TestRefunds:
    def test_a_negative_clearing_matches_a_return_receipts_negative_payment(
        self, world: World
    ) -> None:
        world.enroll()
        doc = receipt_doc([product_row(unit_price=-849)], payments=False, type="RETURN")
        doc["payments"] = [card_payment(-849, authorizationCode=None, referenceNumber="RF1")]
        world.transaction(kind="clearing", amount=-849, reference_number="RF1")
        receipt = world.receipt(doc)
        assert world.owners(receipt) == {world.user.id}

    def test_a_refund_never_matches_the_purchase(self, world: World) -> None:
        world.enroll()
        world.transaction(amount=849, reference_number="RF1")
        doc = receipt_doc([product_row(unit_price=-849)], payments=False, type="RETURN")
        doc["payments"] = [card_payment(-849, authorizationCode=None, referenceNumber="RF1")]
        assert world.owners(world.receipt(doc)) == set()


class TestExpiry:
    def test_an_unmatched_receipt_leaves_the_matching_set_after_seven_days(
        self, world: World
    ) -> None:
        world.enroll()
        world.clock.set(PAID_AT)
        receipt = world.receipt()
        world.clock.set(PAID_AT + timedelta(days=7, minutes=1))
        world.settle()
        assert world.explain(receipt)["card_payments"][0]["status"] == "expired"
        # A late clearing that would have fitted finds nothing to match.
        world.transaction(
            kind="clearing", at=PAID_AT + timedelta(minutes=1), authorization_code=AUTH_CODE
        )
        assert world.owners(receipt) == set()

    def test_a_transaction_leaves_the_matching_set_after_seven_days(self, world: World) -> None:
        world.enroll()
        world.transaction(kind="clearing", authorization_code=AUTH_CODE)
        world.clock.set(PAID_AT + timedelta(days=7, seconds=1))
        receipt = world.receipt()
        assert world.owners(receipt) == set()
