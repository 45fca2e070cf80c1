"""`kuitti serve` as an operator runs it: a real process, real sockets, the console script."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest

from kuitti.services import Services
from tests.conftest import BACKEND, free_port
from tests.factories import auth, receipt_doc

KUITTI = shutil.which("kuitti", path=str(Path(sys.executable).parent)) or "kuitti"
START_TIMEOUT_SECONDS = 300  # generous: a loaded CI host can take minutes to import


def wait_ready(url: str, process: subprocess.Popen[bytes], log: Path) -> None:
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            # A long timeout: a process's first answer is slow on a loaded host, and a poll
            # that gives up on it only asks again, as slowly.
            if httpx.get(f"{url}/readyz", timeout=30).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)  # polling a starting process, not timing a result
    raise AssertionError(f"kuitti serve did not become ready:\n{log.read_text()}")


def start(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.Popen[bytes], Path]:
    log = cwd / "serve.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([KUITTI, "serve", *args], env=env, cwd=cwd, stderr=sink)
    return process, log


def stop(process: subprocess.Popen[bytes]) -> None:
    process.terminate()
    # uvicorn shuts down gracefully, then re-raises the signal: -15 is a clean exit.
    assert process.wait(timeout=20) in {0, -15}


@contextmanager
def serving(
    cwd: Path, services: Services, settings: dict[str, str], *args: str
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``kuitti serve`` on a free port and the test database, with ``settings`` (KUITTI_
    variables) besides: the process and its URL, once ready."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUITTI_PUBLIC_URL": url,
        **settings,
    }
    env.pop("KUITTI_DATABASE_URL", None)
    if BACKEND == "postgresql":
        env["KUITTI_DATABASE_URL"] = services.settings.database_url or ""
    process, log = start(["--port", str(port), *args], env, cwd)
    try:
        wait_ready(url, process, log)
        yield process, url
    finally:
        stop(process)


def create_merchant(env: dict[str, str], cwd: Path) -> str:
    out = subprocess.run(
        [KUITTI, "partner", "create", "--name", "Kauppa", "--role", "merchant", "--json"],
        env=env, cwd=cwd, capture_output=True, check=True,
    )  # fmt: skip
    api_key: str = orjson.loads(out.stdout)["api_key"]
    return api_key


def roundtrip(url: str, api_key: str) -> None:
    created = httpx.post(f"{url}/api/v1/receipts/", json=receipt_doc(), headers=auth(api_key))
    assert created.status_code == 200, created.text
    receipt_id = created.json()["receipt_id"]
    read = httpx.get(f"{url}/api/v1/receipts/{receipt_id}/service_json/", headers=auth(api_key))
    assert read.json() == receipt_doc()


def test_embedded_default_on_sqlite(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    url, env, args = serve
    env["KUITTI_LOG_LEVEL"] = "INFO"
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        ready = [orjson.loads(line) for line in log.read_text().splitlines() if "ready" in line]
        assert ready[0]["event"] == "kuitti is ready"
        assert ready[0]["listening"] == url
        assert ready[0]["database"] == f"sqlite:///{tmp_path / 'var' / 'kuitti.db'}"
        assert ready[0]["worker"] == "in this process"
        assert ready[0]["processes"] == 1
        assert (tmp_path / "var" / "kuitti.db").exists()
        roundtrip(url, create_merchant(env, tmp_path))
    finally:
        stop(process)


def metrics_requests_seen(url: str) -> int:
    """How many ``/metrics`` requests the process answering this one had answered before."""
    page = httpx.get(f"{url}/metrics").text  # a connection of its own: any process may answer
    found = re.search(
        r'^kuitti_http_requests_total\{[^}]*route="/metrics"[^}]*\} (\S+)$', page, re.M
    )
    return int(float(found.group(1))) if found else 0


def test_several_processes_print_one_ready_line(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    url, env, args = serve
    env["KUITTI_LOG_LEVEL"] = "INFO"
    process, log = start([*args, "--workers", "2"], env, tmp_path)
    try:
        wait_ready(url, process, log)
        # One process alone would have seen every earlier request; a smaller count means the
        # other answered too, and a process answers only once its start-up (with any ready
        # line) is done.
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        sent = 0
        while metrics_requests_seen(url) == sent:
            assert time.monotonic() < deadline, "the second server process never answered"
            sent += 1
    finally:
        stop(process)
    ready = [orjson.loads(line) for line in log.read_text().splitlines() if "is ready" in line]
    assert len(ready) == 1, ready
    assert ready[0]["listening"] == url
    assert ready[0]["processes"] == 2
    assert ready[0]["worker"] == "in each of the 2 server processes"


@pytest.mark.postgres_only
def test_several_processes_on_postgresql(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path, services: Services
) -> None:
    url, env, args = serve
    env["KUITTI_DATABASE_URL"] = services.settings.database_url or ""
    env["KUITTI_SECRET_KEY"] = "shared-by-every-instance-of-the-service"
    process, log = start([*args, "--workers", "2", "--no-worker"], env, tmp_path)
    try:
        wait_ready(url, process, log)
        api_key = create_merchant(env, tmp_path)
        for _ in range(10):  # spread over both processes
            roundtrip(url, api_key)
    finally:
        stop(process)


def logged_line(process: subprocess.Popen[bytes], log: Path, event: str) -> dict[str, Any]:
    """The JSON log line of ``event`` (``kuitti is ready``), once the process has logged it."""
    deadline = time.monotonic() + START_TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        for line in log.read_text().splitlines():
            if f'"{event}"' in line:
                found: dict[str, Any] = orjson.loads(line)
                return found
        time.sleep(0.1)  # polling a starting process, not timing a result
    raise AssertionError(f"no {event!r} line was logged:\n{log.read_text()}")


def test_port_0_and_the_public_url_follow_the_port_served_on(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path
) -> None:
    _url, env, _args = serve
    env["KUITTI_LOG_LEVEL"] = "INFO"
    del env["KUITTI_PUBLIC_URL"]
    process, log = start(["--port", "0"], env, tmp_path)
    try:
        listening = logged_line(process, log, "kuitti is ready")["listening"]
        port = int(listening.rpartition(":")[2])
        assert port != 0
        url = f"http://127.0.0.1:{port}"
        assert listening == url
        wait_ready(url, process, log)
        created = httpx.post(
            f"{url}/api/v1/receipts/",
            json=receipt_doc(),
            headers=auth(create_merchant(env, tmp_path)),
        )
        assert created.json()["receipt_web_url"].startswith(f"{url}/r/")
    finally:
        stop(process)
