"""Card-linking after the commit: the ingest transaction records a receipt's CARD payments, due
at once; the matching worker decides them, woken by the commit (in this process) or by
PostgreSQL's NOTIFY (from another), and a committed payment is never lost."""

from __future__ import annotations

import pytest
from sqlalchemy import text, update

from kuitti.models.cards import CardPaymentRecord
from tests.cards.support import AUTH_CODE, PAID_AT, World
from tests.conftest import BACKEND
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import WorkerThread, wait_until

postgres_only = pytest.mark.skipif(BACKEND != "postgresql", reason="needs PostgreSQL")


class TestRecordedInTheIngestTransaction:
    def test_the_receipt_commits_with_its_payment_pending(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(match=False)
        assert world.owners(receipt) == set()
        assert world.explain(receipt)["card_payments"][0]["reason"]["why"] == "pending"
        assert world.settle() == 1  # the worker's step
        assert world.owners(receipt) == {world.user.id}

    def test_a_transaction_arriving_first_decides_the_pending_payment(self, world: World) -> None:
        world.enroll()
        receipt = world.receipt(match=False)
        world.transaction(authorization_code=AUTH_CODE)
        assert world.owners(receipt) == {world.user.id}
        assert world.settle() == 0  # nothing left for the worker

    def test_a_payment_nobody_decided_is_matched_by_a_later_sweep(self, world: World) -> None:
        """A worker that crashed after the commit (or never ran) loses nothing: the payment is
        due until a step decides it."""
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(match=False)
        world.later(days=2)
        world.settle()
        assert world.owners(receipt) == {world.user.id}


class TestRunningWorker:
    def test_a_pilot_receipt_reaches_the_bank_woken_by_the_commit(self, world: World) -> None:
        with Receiver() as endpoint:
            bank = world.pilot_bank(webhook_url=endpoint.url)
            world.clock.set(PAID_AT)
            # Polls 30 s (matching) and 600 s (webhooks) apart: once the worker has taken its
            # first round, only the commit's wake-up brings a receipt within the wait.
            with WorkerThread(world.services, mail=True, poll_seconds=600):
                first = world.receipt(match=False)
                endpoint.wait_for(1)
                second = world.receipt(match=False)
                calls = endpoint.wait_for(2)
        for call, receipt in zip(calls, (first, second), strict=True):
            assert call.headers["authorization"] == f"Token {bank.webhook_key}"
            assert b'"full_receipt_notification"' in call.body
            assert receipt.encode() in call.body

    @postgres_only
    def test_wakes_on_notify_from_another_process(self, world: World) -> None:
        """A payment made due by another process reaches this worker only through NOTIFY: a Core
        update and NOTIFY in one transaction, no Session here to wake the worker in-process."""
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(match=False)
        with world.services.db.engine.begin() as connection:
            connection.execute(update(CardPaymentRecord).values(settle_at=None))
        with WorkerThread(world.services, mail=True, poll_seconds=600):
            with world.services.db.engine.begin() as connection:
                connection.execute(update(CardPaymentRecord).values(settle_at=world.clock.now()))
                connection.execute(text("NOTIFY kuitti_card_matching"))
            wait_until(lambda: world.owners(receipt) == {world.user.id})
