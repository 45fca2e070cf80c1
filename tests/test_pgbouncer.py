"""``kuitti serve`` behind a real PgBouncer in transaction pooling mode (``tests/pgcluster.py``):
migrations, receipt posts and reads from several clients at once, and a webhook woken through
the direct ``LISTEN`` URL."""

from __future__ import annotations

import os
import subprocess
import threading
from pathlib import Path

import httpx
import psycopg
import pytest

from kuitti.clock import SystemClock
from kuitti.db import Database
from kuitti.models.outbox import DeliveryStatus
from kuitti.services import Services
from tests.conftest import free_port, make_settings
from tests.factories import auth, receipt_doc
from tests.pgcluster import PgCluster, pg_cluster, pgbouncer
from tests.test_serve import KUITTI, create_merchant, start, stop, wait_ready
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import delivery, queue, wait_until, webhook_partner

pytestmark = pytest.mark.postgres_only  # a cluster of its own: run once, in the PostgreSQL run

CLIENTS = 4
RECEIPTS_EACH = 15  # past psycopg's prepare threshold (5) on every pooled connection
LISTENER = "kuitti-listen"


def _post_and_read(url: str, api_key: str, failures: list[str]) -> None:
    with httpx.Client(base_url=url, headers=auth(api_key), timeout=60) as client:
        for _ in range(RECEIPTS_EACH):
            created = client.post("/api/v1/receipts/", json=receipt_doc())
            if created.status_code != 200:
                failures.append(f"post {created.status_code}: {created.text}")
                continue
            receipt_id = created.json()["receipt_id"]
            read = client.get(f"/api/v1/receipts/{receipt_id}/service_json/")
            if read.status_code != 200 or read.json() != receipt_doc():
                failures.append(f"read {read.status_code}: {read.text[:200]}")
        listed = client.get("/api/v1/receipts/")
        if listed.status_code != 200:
            failures.append(f"list {listed.status_code}: {listed.text[:200]}")


def test_kuitti_serves_through_pgbouncer_in_transaction_mode(tmp_path: Path) -> None:
    with pg_cluster() as cluster, pgbouncer(cluster, pool_mode="transaction") as bouncer:
        port = free_port()
        url = f"http://127.0.0.1:{port}"
        env = {
            **os.environ,
            "PATH": f"{Path(KUITTI).parent}:/usr/bin:/bin",
            "KUITTI_PUBLIC_URL": url,
            "KUITTI_LOG_LEVEL": "WARNING",
            "KUITTI_DATABASE_URL": PgCluster.url_of(bouncer),
            # Around the pooler, named so the test can find its connection on the server.
            "KUITTI_LISTEN_DATABASE_URL": f"{cluster.url}?application_name={LISTENER}",
            "KUITTI_DB_PREPARED_STATEMENTS": "false",  # PgBouncer before 1.21 keeps none
            "KUITTI_SECRET_KEY": "shared-by-every-instance-of-kuitti-here",
            "KUITTI_WEBHOOK_ALLOW_INSECURE": "true",
        }
        upgraded = subprocess.run(
            [KUITTI, "db", "upgrade"], env=env, cwd=tmp_path, capture_output=True, text=True
        )
        assert upgraded.returncode == 0, upgraded.stderr
        process, log = start(["--port", str(port)], env, tmp_path)
        db = Database(PgCluster.url_of(bouncer), pool_size=2, prepared_statements=False)
        try:
            wait_ready(url, process, log)
            api_key = create_merchant(env, tmp_path)
            failures: list[str] = []
            clients = [
                threading.Thread(target=_post_and_read, args=(url, api_key, failures))
                for _ in range(CLIENTS)
            ]
            for client in clients:
                client.start()
            for client in clients:
                client.join(timeout=300)
            assert failures == []

            settings = make_settings(
                cluster.url, tmp_path / "var", url, secret_key=env["KUITTI_SECRET_KEY"]
            )
            services = Services(settings=settings, db=db, clock=SystemClock())
            with Receiver() as endpoint:
                partner = webhook_partner(services, endpoint.url)
                delivery_id = queue(services, partner)
                endpoint.wait_for(1, 30)
                wait_until(
                    lambda: delivery(services, delivery_id).status == DeliveryStatus.DELIVERED,
                    30,
                )
            with psycopg.connect(cluster.url) as direct:
                listening = direct.execute(
                    "SELECT query FROM pg_stat_activity WHERE application_name = %s",
                    (LISTENER,),
                ).fetchall()
            assert listening, "no LISTEN connection straight to PostgreSQL"
            assert all(query.startswith("LISTEN") for (query,) in listening), listening
        finally:
            stop(process)
            db.dispose()
        assert "Traceback" not in log.read_text(), log.read_text()
