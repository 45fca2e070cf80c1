"""What a real ``kuitti serve`` process writes to its log: one JSON object per line, every line
(server errors included, logged once), and no secret from a path or a database error."""

from __future__ import annotations

import os
import sqlite3
import subprocess
import threading
import uuid
from pathlib import Path

import httpx
import orjson
import pytest
from sqlalchemy import text
from sqlalchemy.exc import DBAPIError

from kuitti.config import Settings
from kuitti.links import private_link_token
from kuitti.logs import redact_path
from kuitti.services import Services
from tests.conftest import BACKEND, free_port
from tests.factories import auth, receipt_doc
from tests.test_serve import KUITTI, create_merchant, start, stop, wait_ready

RESET_TOKEN = "reset-SECRET-0123456789abcdef"
VERIFY_TOKEN = "verify-SECRET-0123456789abcdef"


def test_every_line_is_json_and_holds_no_secret(tmp_path: Path) -> None:
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "KUITTI_PUBLIC_URL": url,
        "KUITTI_LOG_LEVEL": "INFO",
        "KUITTI_VAR_DIR": str(tmp_path / "var"),
    }
    env.pop("KUITTI_DATABASE_URL", None)
    process, log = start(["--port", str(port)], env, tmp_path)
    try:
        wait_ready(url, process, log)
        api_key = create_merchant(env, tmp_path)
        created = httpx.post(f"{url}/api/v1/receipts/", json=receipt_doc(), headers=auth(api_key))
        assert created.status_code == 200, created.text
        # The private link, computed as the server does from its own secret.
        settings = Settings(
            public_url=url, secret_key=(tmp_path / "var" / "secret_key").read_text().strip()
        )
        receipt_id = uuid.UUID(created.json()["receipt_id"])
        link_token = private_link_token(settings, receipt_id)
        assert httpx.get(f"{url}/r/{link_token}").status_code == 200
        assert httpx.get(f"{url}/r/{link_token}/pdf").status_code == 200
        httpx.get(f"{url}/password-reset/{RESET_TOKEN}")
        httpx.get(f"{url}/verify-email/{VERIFY_TOKEN}")
        # A table gone from under the server: an unhandled error, logged once.
        with sqlite3.connect(tmp_path / "var" / "kuitti.db") as db:
            db.execute("ALTER TABLE receipts RENAME TO receipts_gone")
        crashed = httpx.get(f"{url}/api/v1/receipts/", headers=auth(api_key))
        assert crashed.status_code == 500
        assert crashed.json()["error"] == "internal_error"
    finally:
        stop(process)
    lines = log.read_text().splitlines()
    assert lines
    events = [orjson.loads(line) for line in lines]  # fails on any line that is not JSON
    assert all(isinstance(event, dict) for event in events)
    whole = log.read_text()
    for secret in (RESET_TOKEN, VERIFY_TOKEN, link_token, api_key):
        assert secret not in whole
    errors = [event for event in events if event.get("event") == "unhandled error"]
    assert len(errors) == 1
    assert "parameters hidden" in errors[0]["exception"]
    paths = {event.get("path") for event in events}
    assert "/password-reset/<redacted>" in paths
    assert "/r/<redacted>/pdf" in paths


LOGGING_CLIENTS = 8
REQUESTS_PER_CLIENT = 500  # enough lines that two processes' writes meet many times


def test_several_processes_never_glue_lines(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path, services: Services
) -> None:
    url, env, args = serve
    env["KUITTI_LOG_LEVEL"] = "INFO"
    if BACKEND == "postgresql":
        env["KUITTI_DATABASE_URL"] = services.settings.database_url or ""
    out, err = tmp_path / "stdout.log", tmp_path / "stderr.log"
    with out.open("wb") as stdout, err.open("wb") as stderr:
        process = subprocess.Popen(
            [KUITTI, "serve", *args, "--workers", "2"],
            env=env, cwd=tmp_path, stdout=stdout, stderr=stderr,
        )  # fmt: skip
    try:
        wait_ready(url, process, err)

        def client() -> None:
            with httpx.Client(base_url=url, timeout=30) as http:
                for _ in range(REQUESTS_PER_CLIENT):  # a new connection: either process answers
                    http.get("/healthz", headers={"Connection": "close"})

        threads = [threading.Thread(target=client) for _ in range(LOGGING_CLIENTS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    finally:
        stop(process)
    lines = out.read_bytes().splitlines() + err.read_bytes().splitlines()
    glued = [line for line in lines if not isinstance(_parsed(line), dict)]
    assert glued == []
    requests = [line for line in lines if b'"event":"request"' in line]
    assert len(requests) >= LOGGING_CLIENTS * REQUESTS_PER_CLIENT


def _parsed(line: bytes) -> object:
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError:
        return None


@pytest.mark.parametrize(
    ("path", "logged"),
    [
        ("/password-reset/abc", "/password-reset/<redacted>"),
        ("/verify-email/abc", "/verify-email/<redacted>"),
        ("/r/abc", "/r/<redacted>"),
        ("/r/abc/pdf", "/r/<redacted>/pdf"),
        ("/password-reset", "/password-reset"),
        ("/ns/kauppa/r/1234", "/ns/kauppa/r/1234"),
        ("/api/v1/receipts/", "/api/v1/receipts/"),
    ],
)
def test_redact_path(path: str, logged: str) -> None:
    assert redact_path(path) == logged


def test_database_errors_hide_their_parameters(services: Services) -> None:
    secret = "parameter-SECRET-42"
    with pytest.raises(DBAPIError) as caught, services.db.session() as session:
        session.execute(text("SELECT * FROM no_such_table WHERE v = :v"), {"v": secret})
    assert secret not in str(caught.value)
