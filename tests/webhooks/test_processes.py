"""The worker where operators run it: inside ``kuitti serve`` (the app's lifespan) and as the
``kuitti worker`` console script."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import orjson
import uvicorn

from kuitti.app import create_app
from kuitti.services import Services
from tests.conftest import free_port
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import queue, wait_until, webhook_partner

KUITTI = str(Path(sys.executable).parent / "kuitti")


class TestInProcessWorker:
    def test_the_app_lifespan_runs_the_worker(self, services: Services) -> None:
        app = create_app(
            services.settings, db=services.db, clock=services.clock, run_worker_in_process=True
        )
        server = uvicorn.Server(
            uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="warning")
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        try:
            wait_until(lambda: server.started)
            with Receiver() as endpoint:
                partner = webhook_partner(services, endpoint.url)
                delivery_id = queue(services, partner)  # the commit wakes the worker
                [call] = endpoint.wait_for(1)
        finally:
            server.should_exit = True
            thread.join(timeout=30)
        assert not thread.is_alive(), "the server (and its worker) did not stop"
        assert call.webhook_id == str(delivery_id)


class TestWorkerCommand:
    def test_kuitti_worker_delivers_and_stops_on_sigterm(
        self, services: Services, tmp_path: Path
    ) -> None:
        with Receiver() as endpoint:
            partner = webhook_partner(services, endpoint.url)
            delivery_id = queue(services, partner)
            env = {
                **os.environ,
                "KUITTI_DATABASE_URL": services.db.url,
                "KUITTI_SECRET_KEY": str(services.settings.secret_key),
                "KUITTI_VAR_DIR": str(tmp_path),
                "KUITTI_WEBHOOK_ALLOW_INSECURE": "true",
                "KUITTI_LOG_LEVEL": "INFO",
            }
            # The command's clock is the real one: the row (queued at the frozen test time,
            # in the past) is due at once.
            process = subprocess.Popen(
                [KUITTI, "worker"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE
            )
            try:
                [call] = endpoint.wait_for(1, timeout_seconds=60)
            finally:
                process.send_signal(signal.SIGTERM)
                try:
                    returncode = process.wait(timeout=30)
                finally:
                    if process.poll() is None:
                        process.kill()
                    assert process.stdout is not None
                    assert process.stderr is not None
                    stdout, stderr = process.stdout.read(), process.stderr.read()
                    process.stdout.close()
                    process.stderr.close()
        assert call.webhook_id == str(delivery_id)
        assert returncode == 0
        # The log goes to stderr, one JSON object a line, with a line for the attempt.
        assert stdout == b""
        lines = [orjson.loads(line) for line in stderr.splitlines()]
        [attempt] = [line for line in lines if line["event"] == "webhook attempt"]
        assert attempt["delivery_id"] == str(delivery_id)
        assert attempt["status_code"] == 200
        assert attempt["level"] == "info"
