"""Shedding by a request's wait (``kuitti.edge``): a request that waited longer than
``KUITTI_MAX_QUEUE_SECONDS`` before its process took it up is answered 503 with ``Retry-After``
in the error shape without running the application, and a fresh one is served. On PostgreSQL, a
read that finds every connection of the read pool taken is refused after a short wait instead of
queueing for the pool's whole timeout.

The wait is made real: the server process is stopped (SIGSTOP) while the requests are sent, so
they wait in the kernel's accept queue, as under overload, until it is continued past the bound.
Which way each request goes depends on that bound, not on how fast the host runs. The rule for a
standing queue is checked on ``Queue`` itself, with the moments given."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import subprocess
import threading
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import httpx
import orjson
import pytest
from sqlalchemy import select, text

from kuitti.admission import STANDING_REQUESTS
from kuitti.db import ASYNC_READ_CONNECTIONS, READ_BY, READ_LINE, Database, ReadLine
from kuitti.edge import SHARE_WEIGHT, InFlight, Queue
from kuitti.errors import ServiceBusy
from kuitti.models import Partner
from kuitti.services import Services
from tests.factories import make_partner
from tests.test_serve import serving

LONGEST_WAIT_SECONDS = 1.0
# A bound for a test that would otherwise wait for ever on a server that never answers.
SOCKET_TIMEOUT_SECONDS = 60


@pytest.fixture(scope="module")
def server(
    tmp_path_factory: pytest.TempPathFactory, session_services: Services
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    settings = {"KUITTI_MAX_QUEUE_SECONDS": str(LONGEST_WAIT_SECONDS)}
    with serving(tmp_path_factory.mktemp("s"), session_services, settings, "--no-worker") as s:
        yield s


def send(url: str, path: str) -> socket.socket:
    sock = socket.create_connection(
        ("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=SOCKET_TIMEOUT_SECONDS
    )
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    return sock


def answer(sock: socket.socket) -> tuple[bytes, dict[str, str], object]:
    """Reads until the server closes the connection, or until a whole answer arrived."""
    data = b""
    with sock:
        while True:
            head, _, body = data.partition(b"\r\n\r\n")
            lines = head.decode("latin-1").split("\r\n")
            headers = dict(line.lower().split(": ", 1) for line in lines[1:] if ": " in line)
            if "content-length" in headers and len(body) >= int(headers["content-length"]):
                return lines[0].encode(), headers, orjson.loads(body)
            chunk = sock.recv(65536)
            assert chunk, data
            data += chunk


def held_past_the_bound(
    process: subprocess.Popen[bytes], url: str, paths: list[str]
) -> list[socket.socket]:
    """Requests sent while the server is stopped, the server continued once they are older than
    the bound: the time passing is the condition under test, not a guess at how long
    something takes."""
    process.send_signal(signal.SIGSTOP)
    try:
        socks = [send(url, path) for path in paths]
        older = time.monotonic() + LONGEST_WAIT_SECONDS * 1.5
        while (left := older - time.monotonic()) > 0:
            threading.Event().wait(left)
    finally:
        process.send_signal(signal.SIGCONT)
    return socks


def test_a_request_held_past_the_bound_is_503_and_a_fresh_one_is_served(
    server: tuple[subprocess.Popen[bytes], str],
) -> None:
    process, url = server
    shed, health = held_past_the_bound(process, url, ["/api/v1/receipts/", "/healthz"])
    status, headers, body = answer(shed)
    assert status == b"HTTP/1.1 503 Service Unavailable"
    assert headers["retry-after"] == "1"
    assert headers["connection"] == "close"
    assert body == {
        "error": "service_unavailable",
        "decription": "The service is busier than it can serve; nothing was done. "
        "Try again shortly.",
    }
    # The health endpoints are answered however long they waited: a loaded process is alive.
    assert answer(health)[2] == {"status": "ok"}
    # A request that did not wait is served (401: the application ran and asked for a key).
    fresh = httpx.get(f"{url}/api/v1/receipts/", timeout=SOCKET_TIMEOUT_SECONDS)
    assert fresh.status_code == 401
    assert fresh.json()["error"] == "unauthorized"
    metrics = httpx.get(f"{url}/metrics", timeout=SOCKET_TIMEOUT_SECONDS).text
    assert 'kuitti_http_requests_total{method="GET",route="shed",status="503"} 1.0' in metrics


class TestQueue:
    """``longest`` 1 s, the target 0.25 s, intervals of 0.2 s."""

    def test_a_wait_past_the_longest_is_refused_and_a_short_one_served(self) -> None:
        queue = Queue(1.0, 0.25, 0.2)
        assert not queue.admits(1.001, late_when_read=True, now=10.0)
        assert queue.admits(0.0, now=10.01)

    def test_a_queue_stands_from_the_late_request_that_shows_it(self) -> None:
        """A burst shorter than ``STANDING_REQUESTS`` is served; the request that makes it that
        many, all late, is refused, and with it the rest of the interval's late ones, not only
        the next interval's."""
        queue = Queue(1.0, 0.25, 0.2)
        late = STANDING_REQUESTS - 1
        assert all(
            queue.admits(0.9, late_when_read=True, now=10.0 + step / 1000) for step in range(late)
        )
        assert not queue.standing
        assert not queue.admits(0.9, late_when_read=True, now=10.1)
        assert queue.standing
        assert queue.admits(0.1, now=10.11)  # fresh requests are served meanwhile
        # The interval's late requests decide the next one: it serves the fresh only.
        assert queue.admits(0.1, now=10.25)
        assert not queue.admits(0.3, late_when_read=True, now=10.26)
        assert queue.admits(0.1, now=10.3)
        assert queue.admits(
            0.9, late_when_read=True, now=10.5
        )  # the interval before was mostly fresh
        assert not queue.standing

    def test_a_queue_with_more_fresh_requests_than_late_does_not_stand(self) -> None:
        queue = Queue(1.0, 0.25, 0.2)
        assert all(queue.admits(0.1, now=10.0 + step / 1000) for step in range(40))
        assert all(
            queue.admits(0.5, late_when_read=True, now=10.05 + step / 1000) for step in range(40)
        )
        assert not queue.admits(
            0.5, late_when_read=True, now=10.1
        )  # the 41st late: more late than fresh
        assert queue.standing

    def test_a_standing_queue_is_served_only_below_the_target_until_most_wait_less(
        self,
    ) -> None:
        queue = Queue(1.0, 0.25, 0.2)
        # 40 late requests in an interval: it stands from the one that makes it 32.
        served = [
            queue.admits(0.5, late_when_read=True, now=10.0 + step / 200) for step in range(40)
        ]
        assert served == [True] * (STANDING_REQUESTS - 1) + [False] * (41 - STANDING_REQUESTS)
        assert queue.admits(0.2, now=10.21)  # below the target: served
        assert queue.standing
        assert not queue.admits(0.3, late_when_read=True, now=10.22)  # above the target, refused
        assert not queue.admits(0.9, late_when_read=True, now=10.3)
        # An interval of few late requests (or fewer than fresh ones) ends it.
        assert queue.admits(0.1, now=10.4)
        assert queue.admits(0.5, late_when_read=True, now=10.45)  # not standing again: served
        assert not queue.standing

    def test_a_few_late_requests_are_not_a_standing_queue(self) -> None:
        """A few clients on a host short of CPU: each request late, but a few an interval."""
        queue = Queue(1.0, 0.25, 0.2)
        assert all(
            queue.admits(0.5, late_when_read=True, now=10.0 + step / 200)
            for step in range(STANDING_REQUESTS - 1)
        )
        assert queue.admits(0.5, late_when_read=True, now=10.25)
        assert not queue.standing

    def test_an_interval_long_ago_decides_nothing(self) -> None:
        queue = Queue(1.0, 0.25, 0.2)
        for step in range(100):
            queue.admits(0.5, late_when_read=True, now=10.0 + step / 1000)
        assert queue.standing
        assert queue.admits(0.5, late_when_read=True, now=11.0)  # the late interval ended 0.8 s ago
        assert not queue.standing

    def test_a_request_refused_before_it_is_taken_up_is_counted_once(self) -> None:
        """``refuses_already`` refuses only what ``admits`` would refuse whatever the rest of
        the wait, the wait for the requests ahead included, and counts only what it refuses:
        the rest ``admits`` counts when the request is taken up."""
        queue = Queue(1.0, 0.25, 0.2)
        assert not queue.refuses_already(0.5, now=10.0)  # late, but the queue does not stand
        assert (queue.late, queue.fresh) == (0, 0)
        assert queue.refuses_already(1.5, now=10.01)  # past the longest
        assert (queue.late, queue.fresh, queue.late_when_read) == (1, 0, 1)
        queue.standing = True
        assert not queue.refuses_already(0.1, now=10.02, ahead=0.1)  # in time, all told
        assert queue.refuses_already(0.1, now=10.03, ahead=0.2)  # late behind the others
        assert (queue.late, queue.fresh, queue.late_when_read) == (2, 0, 1)
        assert queue.admits(0.2, now=10.04)
        assert (queue.late, queue.fresh) == (2, 1)

    def test_a_standing_queue_stands_while_a_third_of_an_interval_is_late(self) -> None:
        """Shedding half the load leaves late and fresh requests about equal: it takes more
        late than fresh to make a queue stand, but more than a third late keeps it standing."""

        def interval(queue: Queue, began: float, late: int, fresh: int) -> None:
            for step in range(fresh):
                queue.admits(0.1, now=began + step / 1000)
            for step in range(late):
                queue.admits(0.5, late_when_read=True, now=began + (fresh + step) / 1000)

        never_stood = Queue(1.0, 0.25, 0.2)
        interval(never_stood, 10.0, late=40, fresh=70)
        interval(never_stood, 10.21, late=40, fresh=70)
        assert not never_stood.standing

        queue = Queue(1.0, 0.25, 0.2)
        interval(queue, 10.0, late=40, fresh=0)
        assert queue.standing
        interval(queue, 10.21, late=40, fresh=70)  # 40 of 110 late: over a third
        interval(queue, 10.42, late=34, fresh=70)  # decided by the interval before: standing
        assert queue.standing
        interval(queue, 10.63, late=0, fresh=1)  # 34 of 104: under a third
        assert not queue.standing

    def test_requests_late_only_inside_the_process_do_not_make_a_queue_stand(self) -> None:
        """Clients that each send their next request on the last one's answer: however late
        their requests when taken up, the wait is their own queue's, bounded by their number,
        and none arrived late. Only requests late before the process read them (the accept
        queue of an overloaded process) make it stand."""
        queue = Queue(1.0, 0.25, 0.2)
        assert all(queue.admits(0.5, now=10.0 + step / 1000) for step in range(100))
        assert not queue.standing
        for step in range(STANDING_REQUESTS - 1):
            assert queue.admits(0.5, now=10.1 + step / 1000, late_when_read=True)
        assert not queue.standing
        assert not queue.admits(0.5, now=10.15, late_when_read=True)
        assert queue.standing


class TestInFlight:
    def test_the_wait_ahead_is_the_unstarted_requests_by_what_each_cost_the_loop(self) -> None:
        in_flight = InFlight()
        in_flight.unstarted = 3
        assert in_flight.ahead() == 0.0  # nothing learnt yet
        in_flight.started(lag=0.004, ahead=2)  # 2 ms a request ahead
        assert in_flight.unstarted == 2
        assert in_flight.share == pytest.approx(0.002 * SHARE_WEIGHT)
        for _ in range(200):
            in_flight.unstarted += 1
            in_flight.started(lag=0.004, ahead=2)
        assert in_flight.share == pytest.approx(0.002)
        assert in_flight.ahead() == pytest.approx(0.004)
        in_flight.started(lag=0.5, ahead=0)  # nothing ahead: the lag says nothing of a share
        assert in_flight.share == pytest.approx(0.002)


def reads_waiting_on_a_lock(services: Services) -> int:
    with services.db.engine.connect() as connection:
        return int(
            connection.execute(
                text(
                    "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                    " AND wait_event_type = 'Lock' AND query LIKE '%FROM partners%'"
                )
            ).scalar_one()
        )


@contextlib.asynccontextmanager
async def every_read_connection_held(services: Services, db: Database) -> AsyncIterator[None]:
    """``db``'s open read pool, every connection held by a read waiting on a table lock, until
    the block ends: then the lock goes, and the held reads finish."""
    # Every connection made first: the pool grows on demand, and a held read that waited
    # longer than the busy wait for a new connection would be refused itself.
    pool = db._async_pools[asyncio.get_running_loop()]
    await pool.resize(ASYNC_READ_CONNECTIONS, ASYNC_READ_CONNECTIONS)
    await pool.wait(SOCKET_TIMEOUT_SECONDS)
    with services.db.engine.connect() as locker:
        locker.execute(text("LOCK TABLE partners IN ACCESS EXCLUSIVE MODE"))
        held = [
            asyncio.create_task(db.read_rows_async(select(Partner.id), {}))
            for _ in range(ASYNC_READ_CONNECTIONS)
        ]
        deadline = time.monotonic() + SOCKET_TIMEOUT_SECONDS
        while reads_waiting_on_a_lock(services) < ASYNC_READ_CONNECTIONS:
            assert time.monotonic() < deadline, "the reads never took every connection"
            await asyncio.sleep(0.01)  # the loop runs the held reads meanwhile
        yield
        locker.rollback()
    assert all(await asyncio.gather(*held))


def with_async_reads(db: Database, scenario: Callable[[], Awaitable[None]]) -> None:
    async def opened() -> None:
        await db.open_async_reads()
        try:
            await scenario()
        finally:
            await db.close_async_reads()

    try:
        asyncio.run(opened())
    finally:
        db.dispose()


@pytest.mark.postgres_only
def test_a_read_that_finds_every_connection_taken_is_refused_after_the_busy_wait(
    services: Services,
) -> None:
    """The read pool's connections are held by reads waiting on a table lock; one more read
    waits the busy wait, not the pool's timeout, and is refused as busy (503
    ``service_unavailable``), not as a database away. Once the lock goes, every held read
    finishes and the next read is served."""
    make_partner(services, name="Lukko Oy")
    db = Database(services.db.url, async_read_wait=SOCKET_TIMEOUT_SECONDS, busy_wait=0.05)

    async def scenario() -> None:
        async with every_read_connection_held(services, db):
            with pytest.raises(ServiceBusy):
                await db.read_rows_async(select(Partner.id), {})
        assert await db.read_rows_async(select(Partner.id), {})

    with_async_reads(db, scenario)


@pytest.mark.postgres_only
def test_a_read_waits_for_a_connection_no_later_than_its_requests_deadline(
    services: Services,
) -> None:
    """Under a standing queue a request's reads must have their connections by its deadline
    (``READ_BY``, set by the edge). With every connection held and a busy wait longer than the
    test allows, a read whose deadline passed, and one whose deadline comes while it waits, are
    refused as busy; a read past its deadline that finds a connection free is served."""
    make_partner(services, name="Määräaika Oy")
    db = Database(
        services.db.url, async_read_wait=SOCKET_TIMEOUT_SECONDS, busy_wait=SOCKET_TIMEOUT_SECONDS
    )

    async def read_by(seconds_from_now: float) -> list[tuple[object, ...]]:
        READ_BY.set(asyncio.get_running_loop().time() + seconds_from_now)  # this task's only
        return await db.read_rows_async(select(Partner.id), {})

    within = SOCKET_TIMEOUT_SECONDS / 2  # far less than the busy wait

    async def scenario() -> None:
        async with every_read_connection_held(services, db):
            for seconds_from_now in (-1.0, 0.05):
                with pytest.raises(ServiceBusy):
                    await asyncio.wait_for(read_by(seconds_from_now), within)
        assert READ_BY.get() is None
        assert await asyncio.wait_for(read_by(-1.0), within)

    with_async_reads(db, scenario)


@pytest.mark.postgres_only
def test_the_reads_waiting_for_a_connection_are_the_line_the_edge_adds_to_each_wait(
    services: Services,
) -> None:
    """Reads that find every connection taken wait in ``READ_LINE``: while one that left it
    still has another behind it, its wait is the wait ahead of a request taken up now; once
    none waits, nothing is ahead."""
    make_partner(services, name="Jono Oy")
    db = Database(services.db.url, async_read_wait=SOCKET_TIMEOUT_SECONDS)

    async def scenario() -> None:
        async with every_read_connection_held(services, db):
            waiting = [
                asyncio.create_task(db.read_rows_async(select(Partner.id), {})) for _ in range(2)
            ]
            while READ_LINE.waiting < 2:
                await asyncio.sleep(0.01)
            joined = time.monotonic()
            assert READ_LINE.ahead() == READ_LINE.last_wait
            await asyncio.sleep(0.05)  # the line's wait grows meanwhile
            held_for = time.monotonic() - joined
        assert all(await asyncio.gather(*waiting))
        assert READ_LINE.waiting == 0
        assert READ_LINE.ahead() == 0.0
        # The last read to leave the line waited from its joining until the lock went.
        assert READ_LINE.last_wait >= held_for

    with_async_reads(db, scenario)


def test_a_line_no_read_waits_in_puts_nothing_ahead_however_long_its_last_wait() -> None:
    """Else a long wait, once the edge refused every request for it, would refuse them for
    ever: no read would leave the line to lower it."""
    line = ReadLine()
    line.last_wait = 0.3
    assert line.ahead() == 0.0
    line.waiting = 1
    assert line.ahead() == 0.3
