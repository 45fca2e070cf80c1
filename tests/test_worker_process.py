"""``kuitti worker`` as an operator runs it: its start line, and ``/healthz`` and ``/metrics`` on a
port of its own, so its webhook metrics can be scraped."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import typer
from sqlalchemy import update

from kuitti import signatures as receipt_keys
from kuitti.oauth import keys as oauth_keys
from kuitti.security import SecretBox
from kuitti.service_cli import SEALED_COLUMNS, check_secret_opens_sealed_keys
from kuitti.services import Services
from tests.test_serve import KUITTI, logged_line
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import queue, webhook_partner


def test_worker_logs_a_start_line_and_serves_its_metrics(
    services: Services, tmp_path: Path
) -> None:
    env = {
        **os.environ,
        "KUITTI_DATABASE_URL": services.db.url,
        "KUITTI_SECRET_KEY": str(services.settings.secret_key),
        "KUITTI_VAR_DIR": str(tmp_path),
        "KUITTI_WEBHOOK_ALLOW_INSECURE": "true",
        "KUITTI_LOG_LEVEL": "INFO",
    }
    log = tmp_path / "worker.log"
    with Receiver() as endpoint:
        queue(services, webhook_partner(services, endpoint.url))
        with log.open("wb") as sink:
            process = subprocess.Popen(
                [KUITTI, "worker", "--port", "0"], env=env, stdout=sink, stderr=sink
            )
        try:
            line = logged_line(process, log, "kuitti worker is running")
            url = str(line["listening"])
            assert url.startswith("http://127.0.0.1:")
            assert not url.endswith(":0")
            assert line["database"] == services.db.label
            endpoint.wait_for(1, timeout_seconds=60)
            assert httpx.get(f"{url}/healthz").json() == {"status": "ok"}
            deadline = time.monotonic() + 60
            while True:  # the delivery is counted once its outcome is recorded
                metrics = httpx.get(f"{url}/metrics")
                if (
                    "kuitti_webhook_deliveries_sent_total{" in metrics.text
                    or time.monotonic() > deadline
                ):
                    break
                time.sleep(0.1)  # polling a running process, not timing a result
            assert metrics.headers["content-type"].startswith("text/plain")
            assert "kuitti_webhook_deliveries_sent_total{" in metrics.text
            missing = httpx.get(f"{url}/nothing")
            assert missing.status_code == 404
            assert missing.json()["error"] == "not_found"
        finally:
            process.terminate()
            assert process.wait(timeout=30) == 0


def make_sealed_keys(services: Services) -> None:
    """One key of each kind the database keeps sealed with the server secret."""
    box = SecretBox(services.settings.resolved_secret_key)
    now = services.clock.now()
    with services.db.session() as session:
        receipt_keys.current_key(session, box, now=now)
        oauth_keys.current_key(session, box, now=now)
    webhook_partner(services, "https://hooks.example/kuitti")


@pytest.mark.parametrize("kind", range(len(SEALED_COLUMNS)))
def test_each_sealed_key_must_open_with_the_server_secret(services: Services, kind: int) -> None:
    """A key of any one kind that another secret sealed stops the check."""
    make_sealed_keys(services)
    check_secret_opens_sealed_keys(services.db, services.settings)  # opens: no exit
    column = SEALED_COLUMNS[kind]
    foreign = SecretBox("another deployment's server secret, 32+ bytes").seal("{}")
    with services.db.session() as session:
        session.execute(update(column.class_).values({column.key: foreign}))
    with pytest.raises(typer.Exit) as stopped:
        check_secret_opens_sealed_keys(services.db, services.settings)
    assert stopped.value.exit_code == 2


def test_a_worker_with_another_secret_stops_at_start(services: Services, tmp_path: Path) -> None:
    """Started with a secret that does not open the stored keys, ``kuitti worker`` says so and
    exits 2, rather than running and failing every webhook (and ``serve`` every post)."""
    make_sealed_keys(services)
    env = {
        **os.environ,
        "KUITTI_DATABASE_URL": services.db.url,
        "KUITTI_SECRET_KEY": "a secret this database has never seen, 32+ bytes",
        "KUITTI_VAR_DIR": str(tmp_path),
    }
    stopped = subprocess.run(
        [KUITTI, "worker", "--port", "0"], env=env, capture_output=True, timeout=300
    )
    assert stopped.returncode == 2
    assert b"does not open the keys stored in this database" in stopped.stderr
