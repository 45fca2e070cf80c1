"""Slow and oversized clients against a real ``kuitti serve`` on loopback (SQLite in a temporary
directory): how long the server keeps each kind of connection, and its memory before and after.

    .venv/bin/python bench/slow_clients.py [--connections 200] [--seconds 30]

Kinds, ``--connections`` of each (at most 1000), all open at once:

- ``silent``: connects and sends nothing;
- ``slowloris``: sends a request line, then one short header line a second, never the blank line;
- ``endless_header``: sends one header whose value grows by 4 KB every 50 ms and never ends.

Each connection is watched for at most ``--seconds`` (at most 120). Prints one JSON object: per
kind, how many the server closed, the median and largest time to close, the status it answered;
and the server's RSS in MB before and after (``/proc``). The server runs with the default
``KUITTI_MAX_HEADER_BYTES`` and ``KUITTI_HEADER_TIMEOUT_SECONDS`` unless they are set.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

KUITTI = shutil.which("kuitti", path=str(Path(sys.executable).parent)) or "kuitti"
MAX_CONNECTIONS = 1000
MAX_SECONDS = 120


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)
    return 0.0


async def watch(port: int, kind: str, seconds: float) -> tuple[float | None, str]:
    """Seconds until the server closed the connection (None: still open), and its status."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    answer = b""

    async def feed() -> None:
        if kind == "silent":
            return
        writer.write(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")
        if kind == "endless_header":
            writer.write(b"X-Endless: ")
        n = 0
        while True:
            if kind == "slowloris":
                writer.write(b"X-Slow-%d: 1\r\n" % n)
                await asyncio.sleep(1)
            else:
                writer.write(b"a" * 4096)
                await asyncio.sleep(0.05)
            n += 1
            await writer.drain()

    feeder = asyncio.create_task(feed())
    try:
        async with asyncio.timeout(seconds):
            while chunk := await reader.read(65536):
                answer += chunk
        closed: float | None = time.monotonic() - started
    except (TimeoutError, ConnectionError):
        closed = None if time.monotonic() - started >= seconds else time.monotonic() - started
    finally:
        feeder.cancel()
        writer.close()
    status = answer.split(b" ")[1].decode() if answer.startswith(b"HTTP/") else "none"
    return closed, status


def summary(results: list[tuple[float | None, str]]) -> dict[str, Any]:
    times = [t for t, _ in results if t is not None]
    statuses: dict[str, int] = {}
    for _, status in results:
        statuses[status] = statuses.get(status, 0) + 1
    return {
        "connections": len(results),
        "closed_by_server": len(times),
        "median_s_to_close": round(statistics.median(times), 2) if times else None,
        "max_s_to_close": round(max(times), 2) if times else None,
        "answered": statuses,
    }


async def run(port: int, connections: int, seconds: float) -> dict[str, Any]:
    kinds = ("silent", "slowloris", "endless_header")
    tasks = {kind: [watch(port, kind, seconds) for _ in range(connections)] for kind in kinds}
    results = await asyncio.gather(*(asyncio.gather(*tasks[kind]) for kind in kinds))
    return {kind: summary(list(found)) for kind, found in zip(kinds, results, strict=True)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--connections", type=int, default=200)
    parser.add_argument("--seconds", type=float, default=30)
    options = parser.parse_args()
    connections = min(options.connections, MAX_CONNECTIONS)
    seconds = min(options.seconds, MAX_SECONDS)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory(prefix="kuitti-slow-") as workdir:
        env = {**os.environ, "KUITTI_PUBLIC_URL": url, "KUITTI_LOG_LEVEL": "WARNING"}
        env.pop("KUITTI_DATABASE_URL", None)
        server = subprocess.Popen(
            [KUITTI, "serve", "--port", str(port)],
            env=env, cwd=workdir, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            for _ in range(600):
                try:
                    if httpx.get(f"{url}/readyz", timeout=10).status_code == 200:
                        break
                except httpx.TransportError:
                    pass
                time.sleep(0.1)  # polling a starting process
            before = rss_mb(server.pid)
            kinds = asyncio.run(run(port, connections, seconds))
            after = rss_mb(server.pid)
            still_serves = httpx.get(f"{url}/healthz", timeout=10).status_code
        finally:
            server.terminate()
            server.wait(timeout=30)
    print(
        json.dumps(
            {
                "per_kind": kinds,
                "server_rss_mb": {"before": before, "after": after},
                "healthz_after": still_serves,
                "watched_seconds": seconds,
            },
            indent=2,
        )
    )


if __name__ == "__main__":
    main()
