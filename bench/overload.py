"""Overload: a real ``kuitti serve`` (one process, SQLite in a temporary directory) offered more
requests than it can serve, with and without the admission limit.

    .venv/bin/python bench/overload.py [--seconds 10] [--limit 16]

1. Capacity: 8 clients read a merchant's receipt list (each request on a new connection) for
   ``--seconds``; requests per second. The unloaded p99 is that of one client alone.
2. Offered load at 2x and 5x capacity, open loop (requests start on schedule, each on a new
   connection, whatever the answers), for ``--seconds`` each, against a server started with
   ``KUITTI_MAX_REQUESTS_IN_FLIGHT=--limit`` and against one with no effective limit.

Prints one JSON object: capacity, unloaded p99, and per server and load the goodput (200s per
second), how many were shed (503), failed or left unanswered, and the p50/p99 of the admitted
requests in milliseconds. Loopback only; bounded at 60 s a phase and 3000 requests per second.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.factories import receipt_doc  # noqa: E402

KUITTI = shutil.which("kuitti", path=str(Path(sys.executable).parent)) or "kuitti"
MAX_SECONDS = 60
MAX_RATE = 3000
NO_LIMIT = 1_000_000
RECEIPTS = 20
REQUEST_TIMEOUT_SECONDS = 30


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentile(samples: list[float], share: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))] * 1000, 1)


class Server:
    """``kuitti serve`` in a temporary directory, with a merchant and its receipts."""

    def __init__(self, workdir: str, limit: int) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "KUITTI_PUBLIC_URL": self.url,
            "KUITTI_LOG_LEVEL": "WARNING",
            "KUITTI_MAX_REQUESTS_IN_FLIGHT": str(limit),
        }
        self.env.pop("KUITTI_DATABASE_URL", None)
        self.workdir = workdir
        self.process = subprocess.Popen(
            [KUITTI, "serve", "--port", str(self.port)],
            env=self.env, cwd=workdir, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        for _ in range(600):
            try:
                if httpx.get(f"{self.url}/readyz", timeout=10).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            time.sleep(0.1)  # polling a starting process
        created = subprocess.run(
            [KUITTI, "partner", "create", "--name", "Kauppa", "--role", "merchant", "--json"],
            env=self.env, cwd=workdir, capture_output=True, check=True,
        )  # fmt: skip
        self.api_key: str = orjson.loads(created.stdout)["api_key"]
        for _ in range(RECEIPTS):
            posted = httpx.post(
                f"{self.url}/api/v1/receipts/",
                json=receipt_doc(),
                headers={"Authorization": f"Token {self.api_key}"},
                timeout=30,
            )
            assert posted.status_code == 200, posted.text
        self.request = (
            f"GET /api/v1/receipts/ HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Token "
            f"{self.api_key}\r\nConnection: close\r\n\r\n"
        ).encode()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)


def capacity(server: Server, seconds: float) -> tuple[float, float | None]:
    """Requests per second with 8 clients, each sending its next request when the last is
    answered, and the p99 of one client alone (ms)."""

    async def client(stop: float, latencies: list[float]) -> None:
        while time.monotonic() < stop:
            status, elapsed = await one_request(server)
            assert status == "200", status
            latencies.append(elapsed)

    async def clients(count: int, duration: float) -> list[float]:
        latencies: list[float] = []
        stop = time.monotonic() + duration
        await asyncio.gather(*(client(stop, latencies) for _ in range(count)))
        return latencies

    alone = asyncio.run(clients(1, seconds / 2))
    started = time.monotonic()
    served = len(asyncio.run(clients(8, seconds)))
    return served / (time.monotonic() - started), percentile(alone, 0.99)


async def one_request(server: Server) -> tuple[str, float]:
    started = time.perf_counter()
    try:
        async with asyncio.timeout(REQUEST_TIMEOUT_SECONDS):
            reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
            writer.write(server.request)
            answer = await reader.read()
            writer.close()
    except TimeoutError:
        return "unanswered", time.perf_counter() - started
    except OSError:
        return "failed", time.perf_counter() - started
    status = answer[9:12].decode() if answer.startswith(b"HTTP/1.1 ") else "failed"
    return status, time.perf_counter() - started


async def offered(server: Server, rate: float, seconds: float) -> dict[str, Any]:
    """Starts ``rate`` requests a second on schedule for ``seconds``; what became of them."""
    count = int(rate * seconds)
    began = time.monotonic()
    tasks = []
    for n in range(count):
        delay = began + n / rate - time.monotonic()
        if delay > 0:
            await asyncio.sleep(delay)
        tasks.append(asyncio.create_task(one_request(server)))
    results = await asyncio.gather(*tasks)
    admitted = [elapsed for status, elapsed in results if status == "200"]
    statuses: dict[str, int] = {}
    for status, _ in results:
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "offered_per_s": round(rate),
        "goodput_per_s": round(len(admitted) / seconds),
        "answers": statuses,
        "admitted_p50_ms": percentile(admitted, 0.5),
        "admitted_p99_ms": percentile(admitted, 0.99),
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--limit", type=int, default=16)
    options = parser.parse_args()
    seconds = min(options.seconds, MAX_SECONDS)
    report: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="kuitti-overload-") as workdir:
        for name, limit in ((f"limit_{options.limit}", options.limit), ("no_limit", NO_LIMIT)):
            (Path(workdir) / name).mkdir()
            server = Server(str(Path(workdir) / name), limit)
            try:
                if "capacity_per_s" not in report:
                    rate, unloaded = capacity(server, seconds)
                    report["capacity_per_s"] = round(rate)
                    report["unloaded_p99_ms"] = unloaded
                rate = report["capacity_per_s"]
                report[name] = {
                    f"{factor}x": asyncio.run(
                        offered(server, min(rate * factor, MAX_RATE), seconds)
                    )
                    for factor in (2, 5)
                }
            finally:
                server.stop()
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
