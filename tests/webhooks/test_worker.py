"""The worker under faults: leases after a crash, workers racing, the database going away, and
the running loop (wake-ups, e-mail)."""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import sqlite3
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from sqlalchemy import event, func, insert, select, text
from sqlalchemy.engine import make_url

from kuitti.clock import FrozenClock
from kuitti.db import Database
from kuitti.delivery.mail import enqueue_mail
from kuitti.models import WebhookDelivery
from kuitti.models.outbox import DeliveryStatus
from kuitti.services import Services
from kuitti.webhooks.events import WEBHOOKS, enqueue
from kuitti.webhooks.ssrf import TargetGuard
from kuitti.webhooks.worker import (
    Claim,
    Outcome,
    Pipeline,
    claim_due,
    lease_seconds,
    make_client,
    record_outcomes,
    send,
)
from tests.webhooks.proxy import TcpProxy
from tests.webhooks.receivers import Behaviour, Receiver
from tests.webhooks.support import (
    WorkerThread,
    a_receipt_notification,
    deliver,
    delivery,
    queue,
    wait_until,
    webhook_partner,
)

postgres_only = pytest.mark.postgres_only
sqlite_only = pytest.mark.sqlite_only


class TestLease:
    def test_worker_killed_after_claiming(self, services: Services, clock: FrozenClock) -> None:
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            [dead_workers_claim] = claim_due(services)  # …and the worker dies here
            assert deliver(services) == 0  # leased: another worker leaves it alone
            clock.advance(lease_seconds(services.settings) - 1)
            assert deliver(services) == 0
            clock.advance(2)
            assert deliver(services) == 1
            [call] = endpoint.wait_for(1)
        assert call.webhook_id == str(delivery_id)
        assert delivery(services, delivery_id).status == DeliveryStatus.DELIVERED
        # The first worker comes back to life and reports a failure: its lease is gone, so the
        # result stands; its attempt is still logged.
        now = clock.now()
        record_outcomes(
            services,
            [Outcome(dead_workers_claim, now, now, None, 12, "worker was stopped")],
        )
        row = delivery(services, delivery_id)
        assert row.status == DeliveryStatus.DELIVERED
        assert sorted(a.error or "" for a in row.attempts) == ["", "worker was stopped"]

    def test_claims_are_exclusive(self, services: Services) -> None:
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            ids = {queue(services, partner) for _ in range(5)}
            first = claim_due(services, limit=3)
            second = claim_due(services)
            assert len(first) == 3
            assert {c.delivery_id for c in first} | {c.delivery_id for c in second} == ids
            assert not {c.delivery_id for c in first} & {c.delivery_id for c in second}
            assert claim_due(services) == []

    def test_per_partner_limit_leaves_room_for_others(self, services: Services) -> None:
        with Receiver() as busy_endpoint, Receiver() as quiet_endpoint:
            busy = webhook_partner(services, busy_endpoint.url, name="Kiireinen")
            quiet = webhook_partner(services, quiet_endpoint.url, name="Hiljainen")
            for _ in range(10):
                queue(services, busy)
            quiet_id = queue(services, quiet)
            claims = claim_due(services, limit=4, per_partner=3)
        assert collections.Counter(c.partner_id for c in claims) == {
            busy.partner.id: 3,
            quiet.partner.id: 1,
        }
        assert quiet_id in {c.delivery_id for c in claims}

    def test_a_backlog_larger_than_the_window_does_not_starve_others(
        self, services: Services, clock: FrozenClock
    ) -> None:
        with Receiver() as busy_endpoint, Receiver() as quiet_endpoint:
            busy = webhook_partner(services, busy_endpoint.url, name="Kiireinen")
            quiet = webhook_partner(services, quiet_endpoint.url, name="Hiljainen")
            with services.db.session() as session:
                for _ in range(300):
                    enqueue(
                        session, busy.partner, a_receipt_notification(), now=services.clock.now()
                    )
            clock.advance(1)
            quiet_id = queue(services, quiet)  # due after all 300 of the busy partner's
            claims = claim_due(services, limit=4, per_partner=3)
        assert quiet_id in {c.delivery_id for c in claims}
        assert len(claims) == 4


class TestBatchBookkeeping:
    """One claim, many calls, one transaction for every outcome: each row still gets its own."""

    def test_one_partner_failing_while_the_others_succeed_in_the_same_claim(
        self, services: Services, clock: FrozenClock
    ) -> None:
        with (
            Receiver() as first_endpoint,
            Receiver(default=Behaviour(status=500)) as failing_endpoint,
            Receiver() as third_endpoint,
        ):
            endpoints = [first_endpoint, failing_endpoint, third_endpoint]
            partners = [
                webhook_partner(services, endpoint.url, name=f"Kumppani {i}")
                for i, endpoint in enumerate(endpoints)
            ]
            ok_first, failing, ok_third = (queue(services, partner) for partner in partners)
            claims = claim_due(services)
            assert len({claim.lease_token for claim in claims}) == 1  # one claim
            outcomes = _send_all(services, claims)
            record_outcomes(services, outcomes)
            for endpoint in endpoints:
                endpoint.wait_for(1)
        for delivered in (ok_first, ok_third):
            row = delivery(services, delivered)
            assert row.status == DeliveryStatus.DELIVERED
            assert row.lease_token is None
            assert [(a.status_code, a.error) for a in row.attempts] == [(200, None)]
        row = delivery(services, failing)
        assert row.status == DeliveryStatus.PENDING
        assert row.attempt_count == 1
        assert row.lease_token is None  # free for the retry
        first_delay = services.settings.webhook_retry_schedule[0]
        retry_in = (row.next_attempt_at - clock.now()).total_seconds()
        assert first_delay * 0.9 <= retry_in <= first_delay * 1.1
        assert [(a.status_code, a.error) for a in row.attempts] == [(500, "HTTP 500")]

    def test_a_crash_between_sending_and_recording_sends_again(
        self, services: Services, clock: FrozenClock
    ) -> None:
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            ids = {queue(services, partner) for _ in range(3)}
            _send_all(services, claim_due(services))  # answered 2xx…
            assert {call.webhook_id for call in endpoint.wait_for(3)} == {str(i) for i in ids}
            # …and the worker dies before recording: nothing is lost, the rows wait for the lease
            assert deliver(services) == 0
            clock.advance(lease_seconds(services.settings) + 1)
            assert deliver(services) == 3
            calls = endpoint.wait_for(6)
        # At least once: the same webhook-id again, which the partner recognises.
        assert collections.Counter(call.webhook_id for call in calls) == {str(i): 2 for i in ids}
        for delivery_id in ids:
            row = delivery(services, delivery_id)
            assert row.status == DeliveryStatus.DELIVERED
            assert len(row.attempts) == 1  # the lost attempt was never recorded

    def test_a_batch_outcomes_and_the_next_claim_share_one_commit(self, services: Services) -> None:
        """The pipeline records what finished in the transaction that claims the next rows:
        one commit per batch, not one for the outcomes and more for the claim."""
        commits: list[object] = []

        def committed(connection: object) -> None:
            commits.append(connection)

        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            first = queue(services, partner)

            async def main() -> tuple[uuid.UUID, int]:
                async with make_client(services.settings) as client:
                    pipeline = Pipeline(services, client)
                    assert await pipeline.step(woken=True) == 1
                    await asyncio.wait(set(pipeline.tasks))  # answered; the outcome waits
                    assert delivery(services, first).status == DeliveryStatus.PENDING
                    second = queue(services, partner)
                    event.listen(services.db.engine, "commit", committed)
                    try:
                        started = await pipeline.step(woken=True)
                    finally:
                        event.remove(services.db.engine, "commit", committed)
                    await asyncio.wait(set(pipeline.tasks))
                    return second, started

            second, started = asyncio.run(main())
            endpoint.wait_for(2)
        assert started == 1
        assert len(commits) == 1
        assert delivery(services, first).status == DeliveryStatus.DELIVERED
        assert delivery(services, second).lease_token is not None  # claimed, its answer unrecorded


def _send_all(services: Services, claims: list[Claim]) -> list[Outcome]:
    """The worker's sending step for a claim, over real HTTP, without recording anything."""

    async def main() -> list[Outcome]:
        guard = TargetGuard(allow_insecure=services.settings.webhook_allow_insecure)
        async with make_client(services.settings) as client:
            return await asyncio.gather(*(send(services, client, c, guard) for c in claims))

    return asyncio.run(main())


class TestRunningWorker:
    def test_a_backlog_is_drained_without_waiting_for_the_poll(self, services: Services) -> None:
        """One partner's 40 events need several claims (8 at a time to one partner); the calls
        finishing must bring the next claim, not the poll (600 s here)."""
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            with services.db.session() as session:
                for _ in range(40):
                    enqueue(
                        session, partner.partner, a_receipt_notification(), now=services.clock.now()
                    )
            with WorkerThread(services, poll_seconds=600):
                calls = endpoint.wait_for(40, timeout_seconds=30)
                wait_until(lambda: _count(services, DeliveryStatus.DELIVERED) == 40)
        assert len({call.webhook_id for call in calls}) == 40

    def test_wakes_on_commit_without_polling(self, services: Services) -> None:
        with Receiver() as endpoint, WorkerThread(services, poll_seconds=600):
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            [call] = endpoint.wait_for(1, timeout_seconds=10)
            assert call.webhook_id == str(delivery_id)
            wait_until(lambda: delivery(services, delivery_id).status == DeliveryStatus.DELIVERED)

    @postgres_only
    def test_wakes_on_notify_from_another_process(self, services: Services) -> None:
        """Another process's enqueue reaches this worker only through NOTIFY: a Core insert
        and NOTIFY in one transaction, no Session here to wake the worker in-process."""
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            with WorkerThread(services, poll_seconds=600):
                # The first NOTIFY-less round finds nothing; then the row comes from "outside".
                delivery_id = uuid.uuid4()
                now = services.clock.now()
                with services.db.engine.begin() as connection:
                    connection.execute(
                        insert(WebhookDelivery).values(
                            id=delivery_id,
                            partner_id=partner.partner.id,
                            notification_type="receipt_notification",
                            payload='{"notification_type":"receipt_notification"}',
                            bare_authorization=False,
                            status="pending",
                            attempt_count=0,
                            next_attempt_at=now,
                            created_at=now,
                        )
                    )
                    connection.execute(text("NOTIFY kuitti_webhooks"))
                [call] = endpoint.wait_for(1)
        assert call.webhook_id == str(delivery_id)

    def test_two_workers_racing_send_each_event_once(self, services: Services) -> None:
        endpoints = [Receiver() for _ in range(3)]
        for endpoint in endpoints:
            endpoint.__enter__()
        try:
            partners = [
                webhook_partner(services, e.url, name=f"Sovellus {i}")
                for i, e in enumerate(endpoints)
            ]
            with WorkerThread(services), WorkerThread(services):
                # One transaction wakes both workers at once.
                with services.db.session() as session:
                    for i in range(300):
                        enqueue(
                            session,
                            partners[i % 3].partner,
                            a_receipt_notification(),
                            now=services.clock.now(),
                        )
                calls = [e.wait_for(100) for e in endpoints]
                wait_until(lambda: _count(services, DeliveryStatus.DELIVERED) == 300)
        finally:
            for endpoint in endpoints:
                endpoint.__exit__(None, None, None)
        ids = [c.webhook_id for got in calls for c in got]
        assert len(ids) == 300
        assert len(set(ids)) == 300  # no duplicates in the normal path

    def test_sends_mail_too(self, services: Services) -> None:
        with services.db.session() as session:
            message = enqueue_mail(
                session,
                to="maija@example.com",
                subject="Kuitti",
                text_body="Hei",
                now=services.clock.now(),
            )
        eml = Path(services.settings.mail_dir) / f"{message.id}.eml"
        with WorkerThread(services, mail=True):
            wait_until(eml.exists)
        assert b"Subject: Kuitti" in eml.read_bytes()


def _count(services: Services, status: DeliveryStatus) -> int:
    with services.db.session(write=False) as session:
        return (
            session.scalar(
                select(func.count())
                .select_from(WebhookDelivery)
                .where(WebhookDelivery.status == status.value)
            )
            or 0
        )


def _errors() -> float:
    return REGISTRY.get_sample_value("kuitti_webhook_worker_errors_total") or 0.0


class TestDatabaseUnavailable:
    @postgres_only
    def test_worker_survives_and_records_after_the_outage(self, services: Services) -> None:
        url = make_url(services.db.url)
        assert url.host is not None
        with TcpProxy(url.host, url.port or 5432) as proxy:
            proxied = Database(
                url.set(host="127.0.0.1", port=proxy.port).render_as_string(False), pool_size=4
            )
            worker_services = dataclasses.replace(services, db=proxied)
            gate = Behaviour(delay_seconds=30)
            try:
                with Receiver(gate) as endpoint, WorkerThread(worker_services):
                    partner = webhook_partner(services, endpoint.url)
                    delivery_id = queue(services, partner)
                    endpoint.wait_for(1)  # the call is under way…
                    errors_before = _errors()
                    proxy.cut()  # …when the database goes away
                    endpoint.release_all()  # the partner answers 200
                    assert proxy.refused.wait(10)
                    wait_until(lambda: _errors() > errors_before)
                    second = queue(services, partner)  # queued meanwhile (other path to DB)
                    proxy.restore()
                    endpoint.wait_for(2)
                    wait_until(
                        lambda: delivery(services, second).status == DeliveryStatus.DELIVERED
                    )
                    wait_until(
                        lambda: delivery(services, delivery_id).status == DeliveryStatus.DELIVERED
                    )
            finally:
                proxied.dispose()
        calls = endpoint.received
        assert [c.webhook_id for c in calls] == [str(delivery_id), str(second)]
        assert len(delivery(services, delivery_id).attempts) == 1

    @sqlite_only
    def test_worker_survives_a_locked_database(
        self, services: Services, clock: FrozenClock
    ) -> None:
        worker_db = Database(services.db.url, pool_size=4)

        @event.listens_for(worker_db.engine, "connect")
        def _short_busy_timeout(dbapi_connection: sqlite3.Connection, _record: object) -> None:
            dbapi_connection.execute("PRAGMA busy_timeout=50")

        worker_services = dataclasses.replace(services, db=worker_db)
        path = make_url(services.db.url).database
        assert path is not None
        try:
            with Receiver() as endpoint:
                partner = webhook_partner(services, endpoint.url)
                delivery_id = queue(services, partner)
                with services.db.session() as session:  # due in a minute
                    row = session.get(WebhookDelivery, delivery_id)
                    assert row is not None
                    row.next_attempt_at = clock.now() + timedelta(seconds=60)
                blocker = sqlite3.connect(path, isolation_level=None)
                try:
                    with WorkerThread(worker_services):
                        errors_before = _errors()
                        blocker.execute("BEGIN EXCLUSIVE")  # another writer holds the database
                        clock.advance(61)
                        WEBHOOKS.wake()
                        wait_until(lambda: _errors() > errors_before)
                        assert endpoint.received == []
                        blocker.execute("ROLLBACK")
                        [call] = endpoint.wait_for(1)
                        wait_until(
                            lambda: (
                                delivery(services, delivery_id).status == DeliveryStatus.DELIVERED
                            )
                        )
                finally:
                    blocker.close()
        finally:
            worker_db.dispose()
        assert call.webhook_id == str(delivery_id)
