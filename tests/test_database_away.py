"""``kuitti serve`` on a PostgreSQL of its own (``tests/pgcluster.py``) that goes away: killed
under a stream of posts and started again, or made read-only. Requests answer 503 with
``Retry-After`` meanwhile, never 500; kuitti recovers without a restart; nothing acknowledged
is lost. The URL names a dead host first, as a libpq multi-host URL following a failover does.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from kuitti.clock import SystemClock
from kuitti.db import Database
from kuitti.models import Receipt
from kuitti.models.outbox import DeliveryStatus
from kuitti.services import Services
from tests.conftest import free_port, make_settings
from tests.factories import auth, receipt_doc
from tests.pgcluster import PgCluster, pg_cluster, pg_standby
from tests.test_serve import KUITTI, create_merchant, start, stop, wait_ready
from tests.webhooks.receivers import Behaviour, Receiver
from tests.webhooks.support import delivery, queue, wait_until, webhook_partner

pytestmark = pytest.mark.postgres_only  # a cluster of its own: run once, in the PostgreSQL run

POSTERS = 2
OUTAGE_TIMEOUT_SECONDS = 60.0


@dataclass
class Answer:
    status: int  # 0: no answer at all (the connection to kuitti failed)
    at: float
    receipt_id: str | None = None
    error: str | None = None
    retry_after: str | None = None
    sent: float = 0.0


@dataclass
class Posts:
    """Receipt posts sent back to back by a few threads until ``stop``, every answer kept
    (``bench/failover.py`` sends its load with it too)."""

    url: str
    api_key: str
    answers: list[Answer] = field(default_factory=list)
    stop: threading.Event = field(default_factory=threading.Event)

    def run(self) -> None:
        with httpx.Client(base_url=self.url, headers=auth(self.api_key), timeout=60) as client:
            while not self.stop.is_set():
                sent = time.monotonic()
                try:
                    response = client.post("/api/v1/receipts/", json=receipt_doc())
                except httpx.TransportError:
                    self.answers.append(Answer(0, time.monotonic(), sent=sent))
                    continue
                is_json = response.headers.get("content-type", "").startswith("application/json")
                body = response.json() if is_json else {}
                self.answers.append(
                    Answer(
                        response.status_code,
                        time.monotonic(),
                        body.get("receipt_id"),
                        body.get("error"),
                        response.headers.get("retry-after"),
                        sent,
                    )
                )

    def count(self, status: int, since: float = 0.0) -> int:
        return sum(1 for a in list(self.answers) if a.status == status and a.at >= since)


@dataclass
class Served:
    cluster: PgCluster
    url: str
    env: dict[str, str]
    api_key: str
    services: Services


@contextlib.contextmanager
def _serving(cluster: PgCluster, database_url: str, tmp: Path) -> Iterator[Served]:
    """``kuitti db upgrade``, then ``kuitti serve`` (its worker in the process) on
    ``database_url``, with a merchant's key; the serve log holds no traceback at the end."""
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(KUITTI).parent}:/usr/bin:/bin",
        "KUITTI_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "KUITTI_LOG_LEVEL": "WARNING",
        "KUITTI_DATABASE_URL": database_url,
        "KUITTI_SECRET_KEY": "shared-by-every-instance-of-kuitti-here",
        "KUITTI_WEBHOOK_ALLOW_INSECURE": "true",
    }
    upgraded = subprocess.run(
        [KUITTI, "db", "upgrade"], env=env, cwd=tmp, capture_output=True, text=True
    )
    assert upgraded.returncode == 0, upgraded.stderr
    process, log = start(["--port", str(port)], env, tmp)
    db = Database(database_url.replace("postgresql://", "postgresql+psycopg://", 1), pool_size=2)
    try:
        wait_ready(f"http://127.0.0.1:{port}", process, log)
        settings = make_settings(
            database_url,
            tmp / "var",
            f"http://127.0.0.1:{port}",
            secret_key=env["KUITTI_SECRET_KEY"],  # the server's: webhook keys are sealed
        )
        yield Served(
            cluster,
            f"http://127.0.0.1:{port}",
            env,
            create_merchant(env, tmp),
            Services(settings=settings, db=db, clock=SystemClock()),
        )
    finally:
        stop(process)
        db.dispose()
        assert "Traceback" not in log.read_text(), log.read_text()


def _url(*ports: int) -> str:
    """A libpq multi-host URL that follows the host taking writes."""
    return PgCluster.url_of(*ports) + "?target_session_attrs=read-write&connect_timeout=5"


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    with pg_cluster() as cluster:
        dead = free_port()  # nothing listens there: libpq goes on to the next host
        with _serving(cluster, _url(dead, cluster.port), tmp_path_factory.mktemp("s")) as served:
            yield served


def _posting(served: Served) -> tuple[Posts, list[threading.Thread]]:
    posts = Posts(served.url, served.api_key)
    threads = [threading.Thread(target=posts.run, daemon=True) for _ in range(POSTERS)]
    for thread in threads:
        thread.start()
    return posts, threads


def _stopped(posts: Posts, threads: list[threading.Thread]) -> list[Answer]:
    posts.stop.set()
    for thread in threads:
        thread.join(timeout=60)
    return list(posts.answers)


def _assert_only_200_and_503(answers: list[Answer]) -> None:
    statuses = {a.status for a in answers}
    assert statuses <= {200, 503}, statuses
    for answer in answers:
        if answer.status == 503:
            assert answer.error == "database_unavailable"
            assert answer.retry_after is not None
            assert answer.retry_after.isdigit()


def _stored(services: Services, receipt_ids: list[str]) -> int:
    ids = [uuid.UUID(r) for r in receipt_ids]
    with services.db.session(write=False) as session:
        found = session.scalar(select(func.count()).select_from(Receipt).where(Receipt.id.in_(ids)))
        return found or 0


def test_a_killed_database_answers_503_and_comes_back_without_a_restart(served: Served) -> None:
    url = served.url
    with Receiver(default=Behaviour(delay_seconds=30)) as endpoint:
        partner = webhook_partner(served.services, endpoint.url)
        posts, threads = _posting(served)
        try:
            wait_until(lambda: posts.count(200) >= 20, OUTAGE_TIMEOUT_SECONDS)
            delivery_id = queue(served.services, partner)
            endpoint.wait_for(1, OUTAGE_TIMEOUT_SECONDS)  # the call is under way…

            killed = time.monotonic()
            served.cluster.kill()  # …when the database dies
            endpoint.release_all()  # the partner answers 200 while the database is away
            wait_until(lambda: posts.count(503, since=killed) >= 10, OUTAGE_TIMEOUT_SECONDS)
            assert httpx.get(f"{url}/healthz").status_code == 200
            assert httpx.get(f"{url}/readyz", timeout=30).status_code == 503
            stored = next(a.receipt_id for a in posts.answers if a.receipt_id)
            read = httpx.get(  # a read of the event loop's pool, after its 5 s wait
                f"{url}/api/v1/receipts/{stored}/service_json/",
                headers=auth(served.api_key),
                timeout=30,
            )
            assert read.status_code == 503, read.text
            assert read.json()["error"] == "database_unavailable"
            assert "retry-after" in read.headers

            served.cluster.start()
            back = time.monotonic()
            wait_until(lambda: posts.count(200, since=back) >= 20, OUTAGE_TIMEOUT_SECONDS)
            assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200
        finally:
            answers = _stopped(posts, threads)
        wait_until(
            lambda: delivery(served.services, delivery_id).status == DeliveryStatus.DELIVERED,
            OUTAGE_TIMEOUT_SECONDS,
        )
        calls = endpoint.received
    _assert_only_200_and_503(answers)
    acknowledged = [a.receipt_id for a in answers if a.status == 200 and a.receipt_id]
    assert _stored(served.services, acknowledged) == len(acknowledged)
    assert [c.webhook_id for c in calls] == [str(delivery_id)]  # sent once, recorded later
    first_back = min(a.at for a in answers if a.status == 200 and a.at >= back)
    print(  # the measured outage, for the report (pytest -s)
        f"\nkilled: {sum(1 for a in answers if a.status == 503)} posts answered 503, "
        f"{len(acknowledged)} acknowledged, all stored; first 200 "
        f"{first_back - back:.2f} s after the server took connections again "
        f"({first_back - killed:.2f} s after the kill)"
    )


def test_a_read_only_database_answers_503_until_it_takes_writes(served: Served) -> None:
    url = served.url
    posts, threads = _posting(served)
    try:
        wait_until(lambda: posts.count(200) >= 5, OUTAGE_TIMEOUT_SECONDS)
        served.cluster.sql("ALTER SYSTEM SET default_transaction_read_only = on")
        served.cluster.sql("SELECT pg_reload_conf()")
        read_only = time.monotonic()
        wait_until(lambda: posts.count(503, since=read_only) >= 5, OUTAGE_TIMEOUT_SECONDS)
        ready = httpx.get(f"{url}/readyz", timeout=30)
        assert ready.status_code == 503
        assert "read-only" in ready.json()["reason"]
        served.cluster.sql("ALTER SYSTEM RESET default_transaction_read_only")
        served.cluster.sql("SELECT pg_reload_conf()")
        writable = time.monotonic()
        wait_until(lambda: posts.count(200, since=writable) >= 5, OUTAGE_TIMEOUT_SECONDS)
        assert httpx.get(f"{url}/readyz", timeout=30).status_code == 200
    finally:
        answers = _stopped(posts, threads)
    _assert_only_200_and_503(answers)
    acknowledged = [a.receipt_id for a in answers if a.status == 200 and a.receipt_id]
    assert _stored(served.services, acknowledged) == len(acknowledged)


def test_a_promoted_synchronous_standby_loses_no_acknowledged_receipt(tmp_path: Path) -> None:
    """The primary killed under a stream of posts and its synchronous standby promoted: the
    multi-host URL finds the new primary, no acknowledged receipt is missing, no 500."""
    with (
        pg_cluster() as primary,
        pg_standby(primary, synchronous=True) as standby,
        _serving(primary, _url(primary.port, standby.port), tmp_path) as served,
    ):
        posts, threads = _posting(served)
        try:
            wait_until(lambda: posts.count(200) >= 20, OUTAGE_TIMEOUT_SECONDS)
            killed = time.monotonic()
            primary.kill()
            wait_until(lambda: posts.count(503, since=killed) >= 5, OUTAGE_TIMEOUT_SECONDS)
            standby.promote()
            promoted = time.monotonic()
            wait_until(lambda: posts.count(200, since=promoted) >= 20, OUTAGE_TIMEOUT_SECONDS)
        finally:
            answers = _stopped(posts, threads)
        _assert_only_200_and_503(answers)
        acknowledged = [a.receipt_id for a in answers if a.status == 200 and a.receipt_id]
        assert _stored(served.services, acknowledged) == len(acknowledged)
    first_back = min(a.at for a in answers if a.status == 200 and a.at >= promoted)
    print(  # the measured outage, for the report (pytest -s)
        f"\npromoted: {sum(1 for a in answers if a.status == 503)} posts answered 503, "
        f"{len(acknowledged)} acknowledged, all on the promoted standby; first 200 "
        f"{first_back - promoted:.2f} s after the promotion "
        f"({first_back - killed:.2f} s after the kill)"
    )
