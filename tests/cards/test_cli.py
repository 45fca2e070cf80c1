"""``kuitti card enroll`` and ``kuitti receipts explain``, run through Typer's runner against
the test database."""

from __future__ import annotations

import uuid
from datetime import timedelta

from kuitti.models import Card, PartnerRole
from tests.cards.support import AUTH_CODE, HOOK, PAID_AT, World
from tests.factories import make_partner
from tests.test_cli import run, run_json


class TestEnroll:
    def test_pilot_card_json(self, world: World) -> None:
        bank = make_partner(world.services, PartnerRole.BANK_PILOT, name="Pilot", webhook_url=HOOK)
        data = run_json(
            world.services, "card", "enroll", "--partner", str(bank.partner.id),
            "--partner-card-id", "pilot-7", "--masked-pan", "415301******1234",
            "--exp-date", "2028-12-31T23:59:59Z", "--name", "Maija", "--pilot",
        )  # fmt: skip
        assert set(data) == {"service_card_id", "partner_card_id"}
        assert data["partner_card_id"] == "pilot-7"
        with world.services.db.session(write=False) as session:
            card = session.get(Card, uuid.UUID(data["service_card_id"]))
            assert card is not None
            assert card.pilot is True
            assert card.partner_id == bank.partner.id
        # The pilot card then matches on its masked PAN alone.
        world.clock.set(PAID_AT + timedelta(minutes=20))
        receipt = world.receipt()
        assert len(world.webhooks("full_receipt_notification")) == 1
        assert world.matched_card(receipt) == data["service_card_id"]

    def test_pilot_needs_a_bank_pilot_partner(self, world: World) -> None:
        result = run(
            world.services, "card", "enroll", "--partner", str(world.issuer.partner.id),
            "--partner-card-id", "x", "--masked-pan", "415301******1234",
            "--exp-date", "2028-12", "--pilot",
        )  # fmt: skip
        assert result.exit_code == 2
        assert "bank_pilot" in result.output

    def test_a_full_card_number_is_refused(self, world: World) -> None:
        bank = make_partner(world.services, PartnerRole.BANK_PILOT, name="Pilot")
        result = run(
            world.services, "card", "enroll", "--partner", str(bank.partner.id),
            "--partner-card-id", "x", "--masked-pan", "4153011234561234",
            "--exp-date", "2028-12", "--pilot",
        )  # fmt: skip
        assert result.exit_code == 2
        assert "full card number" in result.output
        assert "4153011234561234" not in result.output


class TestExplain:
    def test_a_match(self, world: World) -> None:
        card = world.enroll()
        txn = world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt()
        data = run_json(world.services, "receipts", "explain", receipt)
        [payment] = data["card_payments"]
        assert payment["status"] == "matched"
        match = payment["match"]
        assert match["service_card_id"] == card
        assert match["transaction_id"] == txn["transaction_id"]
        assert match["window"] == "auth (±15 min)"
        assert match["keys"] == [
            "merchant_id", "currency", "amount", "time", "masked_pan",
            "authorization_code",
        ]  # fmt: skip
        human = run(world.services, "receipts", "explain", receipt)
        assert human.exit_code == 0
        assert f"matched card {card}" in human.output
        assert txn["transaction_id"] in human.output

    def test_a_tie_names_the_cards(self, world: World) -> None:
        a = world.enroll("card-a")
        b = world.enroll("card-b")
        world.transaction("card-a")
        world.transaction("card-b")
        receipt = world.receipt()
        human = run(world.services, "receipts", "explain", receipt)
        assert "tied: 2 cards fit" in human.output
        assert a in human.output
        assert b in human.output

    def test_no_candidate(self, world: World) -> None:
        receipt = world.receipt()
        human = run(world.services, "receipts", "explain", receipt)
        assert "no_candidate" in human.output

    def test_unknown_receipt(self, world: World) -> None:
        result = run(world.services, "receipts", "explain", str(uuid.uuid4()))
        assert result.exit_code == 2


class TestSettle:
    def test_settles_a_weak_fit_after_the_auth_window(self, world: World) -> None:
        world.enroll()
        world.transaction()
        world.clock.set(PAID_AT)
        receipt = world.receipt(authorizationCode=None, referenceNumber=None)
        assert world.owners(receipt) == set()
        # settle_due_matches runs in the frozen time; the command itself uses the system clock.
        world.clock.set(PAID_AT + timedelta(minutes=16))
        assert world.settle() == 1
        assert world.owners(receipt) == {world.user.id}
        result = run(world.services, "card", "settle")
        assert result.exit_code == 0
        assert "re-checked" in result.output
