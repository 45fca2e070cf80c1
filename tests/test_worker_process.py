"""``kuitti worker`` as an operator runs it: its start line, and ``/healthz`` and ``/metrics`` on a
port of its own, so its webhook metrics can be scraped."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import httpx

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
