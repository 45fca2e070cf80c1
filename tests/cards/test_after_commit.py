"""Card-linking after the commit: the ingest transaction records a receipt's CARD payments and
queues them; the matching worker decides them, woken by the commit (in this process) or by
PostgreSQL's NOTIFY (from another), and a committed payment is never lost."""

from __future__ import annotations

import pytest
from sqlalchemy import delete, insert, select, text

from kuitti import locks
from kuitti.cards.matching import Matcher, expire_unmatched
from kuitti.models.cards import CardMatchingQueue, CardPaymentRecord
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
        assert world.why(receipt) == "pending"
        assert len(world.queued()) == 1
        assert world.settle() == 1  # the worker's step
        assert world.owners(receipt) == {world.user.id}
        assert world.queued() == set()

    def test_a_new_payment_is_queued_not_made_due(self, world: World) -> None:
        """The queue, not ``settle_at`` = now: the re-check's indexes hold only weak fits
        waiting for their auth window."""
        receipt = world.receipt(match=False)
        with world.services.db.session(write=False) as session:
            settle_at = session.scalars(select(CardPaymentRecord.settle_at)).all()
        assert settle_at == [None]
        assert len(world.queued()) == 1
        assert world.settle() == 1
        assert world.why(receipt) == "no_candidate"
        assert world.queued() == set()

    def test_a_payment_matching_cannot_use_is_not_queued(self, world: World) -> None:
        receipt = world.receipt(match=False, MID=None)
        assert world.why(receipt) == "unmatchable"
        assert world.queued() == set()

    def test_a_transaction_arriving_first_decides_the_pending_payment(self, world: World) -> None:
        world.enroll()
        receipt = world.receipt(match=False)
        world.transaction(authorization_code=AUTH_CODE)
        assert world.owners(receipt) == {world.user.id}
        assert world.queued() == set()  # the decision took it off the queue
        assert world.settle() == 0  # nothing left for the worker

    def test_entries_another_worker_took_are_not_decided_again(self, world: World) -> None:
        """Two workers may read the same entries; the second, once it holds the merchant id's
        lock, finds them gone."""
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(match=False)
        read_by_both = list(world.queued())
        merchant_id = world.explain(receipt)["card_payments"][0]["merchant_id"]
        decided = []
        for _ in range(2):
            with world.services.db.session() as session:
                locks.acquire(session, "match", merchant_id)
                matcher = Matcher(session, world.services.settings, world.clock.now())
                decided.append(matcher.settle_due(merchant_id, read_by_both))
        assert decided == [1, 0]
        assert world.owners(receipt) == {world.user.id}

    def test_a_pending_payment_expired_leaves_the_queue(self, world: World) -> None:
        """A receipt whose payment time is already out of the matching set, expired by the
        sweep before the worker's first decision."""
        receipt = world.receipt(match=False)
        world.later(days=8)
        with world.services.db.session() as session:
            assert expire_unmatched(session, world.clock.now()) == 1
        assert world.why(receipt) == "expired"
        assert world.queued() == set()
        assert world.settle() == 0

    def test_a_payment_nobody_decided_is_matched_by_a_later_sweep(self, world: World) -> None:
        """A worker that crashed after the commit (or never ran) loses nothing: the payment is
        queued until a step decides it."""
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
        """A payment queued by another process reaches this worker only through NOTIFY: a Core
        insert and NOTIFY in one transaction, no Session here to wake the worker in-process."""
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        receipt = world.receipt(match=False)
        queue = CardMatchingQueue
        with world.services.db.engine.begin() as connection:
            taken = delete(queue).returning(queue.payment_id, queue.merchant_id)
            entries = connection.execute(taken).mappings().all()
        assert len(entries) == 1
        with WorkerThread(world.services, mail=True, poll_seconds=600):
            with world.services.db.engine.begin() as connection:
                connection.execute(insert(queue), [dict(entry) for entry in entries])
                connection.execute(text("NOTIFY kuitti_card_matching"))
            wait_until(lambda: world.owners(receipt) == {world.user.id})
