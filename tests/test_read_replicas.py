"""kuitti with a read replica (``KUITTI_READ_DATABASE_URL``) on real clusters
(``tests/pgcluster.py``): a primary and its synchronous standby, made to lag on purpose with
``recovery_min_apply_delay``. A read right after its post is found; a disabled key and a revoked
consent are refused at once though the replica still holds them; a replica away sends reads to
the primary; the primary away leaves reads to the standby once it has applied what it received.

One cluster pair and one server for the module; the primary is stopped by the last test.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import psycopg
import pytest

from kuitti.clock import SystemClock
from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.delivery.service import deliver_to_user
from kuitti.links import private_link_token
from kuitti.models import Receipt
from kuitti.partners.service import NewPartner
from kuitti.replicas import LIST_MAX_LAG_SECONDS
from kuitti.services import Services
from tests.conftest import LiveServer, free_port, make_settings
from tests.factories import add_connection, auth, make_partner, make_user, metric, receipt_doc
from tests.oauth.flow import make_app
from tests.pgcluster import PgCluster, pg_cluster, pg_standby
from tests.webhooks.support import wait_until

pytestmark = pytest.mark.postgres_only  # clusters of its own: run once, in the PostgreSQL run

LAG = "4s"  # the standby applies each commit this long after the primary made it
WAIT_SECONDS = 60.0
RECEIPTS = "/api/v1/receipts/"


def _reads(outcome: str) -> str:
    return f'kuitti_read_replica_reads_total{{outcome="{outcome}"}}'


@dataclass
class Replicated:
    primary: PgCluster
    standby: PgCluster
    services: Services
    client: httpx.Client

    def on_standby(self, sql: str, *params: object) -> tuple[object, ...] | None:
        with psycopg.connect(self.standby.url, autocommit=True) as connection:
            return connection.execute(sql.encode(), params).fetchone()

    def on_primary(self, sql: str, *params: object) -> None:
        with psycopg.connect(self.primary.url, autocommit=True) as connection:
            connection.execute(sql.encode(), params)

    def caught_up(self) -> None:
        """Wait until the standby has applied everything the primary wrote so far."""
        self.primary.wait_until_applied(self.standby)

    def post(self, merchant: NewPartner) -> str:
        answer = self.client.post(RECEIPTS, json=receipt_doc(), headers=auth(merchant.api_key))
        assert answer.status_code == 200, answer.text
        receipt_id: str = answer.json()["receipt_id"]
        return receipt_id

    def read(self, merchant: NewPartner, receipt_id: str) -> None:
        """The merchant reads its receipt as JSON and as a PDF: 200 both."""
        for fmt in ("service_json", "service_pdf"):
            answer = self.client.get(
                f"{RECEIPTS}{receipt_id}/{fmt}/", headers=auth(merchant.api_key)
            )
            assert answer.status_code == 200, answer.text

    def on_replica(self, receipt_id: str) -> bool:
        return self.on_standby("SELECT 1 FROM receipts WHERE id = %s", receipt_id) is not None

    def listed(self, api_key: str) -> list[str]:
        answer = self.client.get(RECEIPTS, headers=auth(api_key))
        assert answer.status_code == 200, answer.text
        return [row["receipt_id"] for row in answer.json()["receipts"]]


@contextlib.contextmanager
def _replicated(var_dir: Path, *, synchronous: bool) -> Iterator[Replicated]:
    """A primary, its standby (synchronous or not) lagging by ``LAG``, and kuitti serving on
    the primary with the standby as its read replica."""
    with pg_cluster() as primary, pg_standby(primary, synchronous=synchronous) as standby:
        standby.reconfigure(f"recovery_min_apply_delay = '{LAG}'")
        db = Database(primary.url.replace("postgresql://", "postgresql+psycopg://"), pool_size=5)
        upgrade(db)
        port = free_port()
        settings = make_settings(
            primary.url,
            var_dir,
            f"http://127.0.0.1:{port}",
            read_database_url=standby.url + "?connect_timeout=2",
        )
        services = Services(settings=settings, db=db, clock=SystemClock())
        try:
            with (
                LiveServer(services, port) as server,
                httpx.Client(base_url=server.url, timeout=60) as client,
            ):
                replicated = Replicated(primary, standby, services, client)
                replicated.caught_up()  # the schema is on the standby
                yield replicated
        finally:
            db.dispose()


@pytest.fixture(scope="module")
def replicated(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Replicated]:
    with _replicated(tmp_path_factory.mktemp("var"), synchronous=True) as replicated:
        yield replicated


def test_a_read_right_after_its_post_is_found_though_the_replica_lags(
    replicated: Replicated,
) -> None:
    client = replicated.client
    merchant = make_partner(replicated.services)
    missed = metric(client, _reads("miss"))
    for _ in range(5):
        receipt_id = replicated.post(merchant)
        assert not replicated.on_replica(receipt_id)  # the replica is behind…
        replicated.read(merchant, receipt_id)  # …and the read is found all the same
        page = client.get(f"/r/{_private_token(replicated, receipt_id)}")
        assert page.status_code == 200, page.text
    assert metric(client, _reads("miss")) >= missed + 15  # read on the primary after a miss
    # /metrics measures the lag (the last post is not applied yet: over the list's bound)…
    assert metric(client, "kuitti_read_replica_lag_seconds") > LIST_MAX_LAG_SECONDS
    lagging = metric(client, _reads("lagging"))
    assert receipt_id in replicated.listed(merchant.api_key)  # …so the primary lists
    assert metric(client, _reads("lagging")) == lagging + 1

    replicated.caught_up()
    served = metric(client, _reads("replica"))
    read = client.get(
        f"{RECEIPTS}{receipt_id}/service_pdf/?layout=roll", headers=auth(merchant.api_key)
    )
    assert read.status_code == 200, read.text
    assert receipt_id in replicated.listed(merchant.api_key)
    assert client.get(f"/r/{_private_token(replicated, receipt_id)}/pdf").status_code == 200
    assert metric(client, _reads("replica")) >= served + 2


def _private_token(replicated: Replicated, receipt_id: str) -> str:
    return private_link_token(replicated.services.settings, uuid.UUID(receipt_id))


def test_a_disabled_key_is_refused_at_once_though_the_replica_still_has_it(
    replicated: Replicated,
) -> None:
    client = replicated.client
    merchant = make_partner(replicated.services)
    receipt_id = replicated.post(merchant)
    replicated.caught_up()
    assert receipt_id in replicated.listed(merchant.api_key)

    replicated.on_primary(
        "UPDATE partners SET disabled_at = now() WHERE id = %s", merchant.partner.id
    )
    still = replicated.on_standby(
        "SELECT disabled_at FROM partners WHERE id = %s", merchant.partner.id
    )
    assert still == (None,)  # the replica has not applied it yet
    read = client.get(f"{RECEIPTS}{receipt_id}/service_json/", headers=auth(merchant.api_key))
    assert read.status_code == 401, read.text
    assert client.get(RECEIPTS, headers=auth(merchant.api_key)).status_code == 401


def test_a_revoked_consent_is_refused_at_once_though_the_replica_still_has_it(
    replicated: Replicated,
) -> None:
    services = replicated.services
    app = make_app(services, name=f"App {uuid.uuid4()}")
    user = make_user(services, f"{uuid.uuid4()}@example.com")
    with services.db.session() as session:
        connection_id = add_connection(
            session, user.id, app.partner.id, now=services.clock.now()
        ).id
    merchant = make_partner(services)
    receipt_id = replicated.post(merchant)
    with services.db.session() as session:
        receipt = session.get(Receipt, uuid.UUID(receipt_id))
        assert receipt is not None
        deliver_to_user(session, receipt, user.id, via="test", now=services.clock.now())
    replicated.caught_up()
    single = f"{RECEIPTS}{receipt_id}/service_json/"
    assert replicated.client.get(single, headers=auth(app.api_key)).status_code == 200
    assert replicated.listed(app.api_key) == [receipt_id]

    replicated.on_primary("UPDATE connections SET revoked_at = now() WHERE id = %s", connection_id)
    still = replicated.on_standby("SELECT revoked_at FROM connections WHERE id = %s", connection_id)
    assert still == (None,)  # the replica has not applied it yet
    read = replicated.client.get(single, headers=auth(app.api_key))
    assert read.status_code == 404, read.text
    assert replicated.listed(app.api_key) == []


def test_a_replica_away_sends_the_reads_to_the_primary(replicated: Replicated) -> None:
    client = replicated.client
    merchant = make_partner(replicated.services)
    receipt_id = replicated.post(merchant)
    replicated.caught_up()
    replicated.standby.stop()
    try:
        away = metric(client, _reads("away"))
        replicated.read(merchant, receipt_id)
        assert receipt_id in replicated.listed(merchant.api_key)
        assert client.get(f"/r/{_private_token(replicated, receipt_id)}").status_code == 200
        ready = client.get("/readyz")
        assert ready.status_code == 200  # a replica outage never takes the service down
        assert ready.json() == {"status": "ready", "read_replica": "away"}
        assert metric(client, "kuitti_read_replica_up") == 0
        assert metric(client, _reads("away")) >= away + 3
    finally:
        replicated.standby.start()
    replicated.caught_up()


def test_reads_come_from_the_standby_while_the_primary_is_stopped(
    replicated: Replicated,
) -> None:
    client = replicated.client
    merchant = make_partner(replicated.services)
    replicated.caught_up()
    replicated.standby.reconfigure("recovery_min_apply_delay = '1h'")
    receipt_id = replicated.post(merchant)  # received by the standby, not applied
    replicated.primary.kill()
    single = f"{RECEIPTS}{receipt_id}/service_json/"
    # Not all it received is applied: a right the primary ended could be in it. 503.
    refused = client.get(single, headers=auth(merchant.api_key))
    assert refused.status_code == 503, refused.text
    assert refused.json()["error"] == "database_unavailable"

    replicated.standby.reconfigure("recovery_min_apply_delay = 0")
    wait_until(lambda: replicated.on_replica(receipt_id), WAIT_SECONDS)
    decided = metric(client, _reads("primary_away"))
    replicated.read(merchant, receipt_id)
    assert receipt_id in replicated.listed(merchant.api_key)
    assert client.get(f"/r/{_private_token(replicated, receipt_id)}/pdf").status_code == 200
    assert metric(client, _reads("primary_away")) >= decided + 3
    assert client.get("/readyz").status_code == 503  # writes cannot be taken


def test_an_asynchronous_replica_can_honour_a_key_disabled_just_before_the_primary_was_lost(
    tmp_path: Path,
) -> None:
    """What docs/replication.md says an asynchronous replica can show: a key disabled on the
    primary after the replica's last received WAL (here: its stream cut first), then the
    primary lost. The replica has applied all it received, so it decides, and the key reads."""
    with _replicated(tmp_path, synchronous=False) as replicated:
        client = replicated.client
        merchant = make_partner(replicated.services)
        receipt_id = replicated.post(merchant)
        replicated.caught_up()
        replicated.standby.sql("ALTER SYSTEM SET primary_conninfo = ''", database="postgres")
        replicated.standby.sql("SELECT pg_reload_conf()", database="postgres")
        wait_until(
            lambda: replicated.on_standby("SELECT count(*) FROM pg_stat_wal_receiver") == (0,),
            WAIT_SECONDS,
        )
        replicated.on_primary(
            "UPDATE partners SET disabled_at = now() WHERE id = %s", merchant.partner.id
        )  # acknowledged at once: no standby waits for it
        replicated.primary.kill()
        read = client.get(f"{RECEIPTS}{receipt_id}/service_json/", headers=auth(merchant.api_key))
        assert read.status_code == 200, read.text  # a synchronous standby would have it: 401
