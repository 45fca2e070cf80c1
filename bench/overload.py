"""Overload: a real ``kuitti serve`` (one process) offered more requests than it can serve, with
and without the bound on a request's wait (``KUITTI_MAX_QUEUE_SECONDS``), on SQLite and on
PostgreSQL.

    .venv/bin/python bench/overload.py [--database both] [--seconds 10] [--rounds 2]
                                       [--max-wait 0.5]

Each request is a merchant's receipt list (``GET /api/v1/receipts/``, 20 receipts) on a new
connection. Two servers run on the same database: one with ``--max-wait`` and one whose bound is
an hour (none, as before the bound). They are measured in turns, round after round, so the other
work on a shared machine falls on both alike.

1. Capacity: 8 clients, each sending its next request when the last is answered, for
   ``--seconds`` against the server without the bound; requests per second.
2. Unloaded: a quarter of capacity, open loop; the p99 of the answers.
3. Offered load at 2x and 5x capacity, open loop, for ``--seconds`` each.

The open-loop load is h2load's (``nghttp2-client``, in C: a Python generator on the same two
cores lagged behind its own schedule by seconds): it opens connections at a fixed rate whatever
the answers, one request on each. Per server and load it prints the goodput (200s per second of
the whole run, until the last answer), the answers by status, the p50/p99 of the 200s and the
p99 of the 503s in milliseconds (from the request's sending, after the connection opened), and
the slowest connection's opening (a full accept queue drops connections, which the kernel then
retries after a second or more). Loopback only; at most 60 s a phase and 3000 connections a
second.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import free_port, kuitti_instance, running  # noqa: E402  (bench/ is the script's own)

from tests.factories import receipt_doc  # noqa: E402

KUITTI = str(Path(sys.executable).parent / "kuitti")
H2LOAD = shutil.which("h2load")
MAX_SECONDS = 60
MAX_RATE = 3000
NO_BOUND_SECONDS = 3600
RECEIPTS = 20
CLOSED_LOOP_CLIENTS = 8
CONNECTION_TIMEOUT_SECONDS = 60


def percentile(samples: list[float], share: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))], 1)


@contextlib.contextmanager
def serving(env: dict[str, str], max_wait: float, workdir: Path) -> Iterator[str]:
    """``kuitti serve`` with ``max_wait`` as its bound; its URL."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_env = {
        **env,
        "KUITTI_PUBLIC_URL": url,
        "KUITTI_LOG_LEVEL": "WARNING",
        "KUITTI_MAX_QUEUE_SECONDS": str(max_wait),
    }
    command = [KUITTI, "serve", "--port", str(port), "--no-worker"]
    with running(command, server_env, f"{url}/readyz", workdir / f"serve-{port}.log"):
        yield url


def capacity(url: str, api_key: str, seconds: float) -> float:
    """Requests per second answered 200 by closed-loop clients, each on new connections."""
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"GET /api/v1/receipts/ HTTP/1.1\r\nHost: {host}\r\nAuthorization: Token {api_key}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()

    async def client(stop: float) -> int:
        served = 0
        while time.monotonic() < stop:
            reader, writer = await asyncio.open_connection(host, int(port))
            writer.write(request)
            answer = await reader.read()
            writer.close()
            assert answer.startswith(b"HTTP/1.1 200 "), answer[:200]
            served += 1
        return served

    async def clients() -> int:
        stop = time.monotonic() + seconds
        return sum(await asyncio.gather(*(client(stop) for _ in range(CLOSED_LOOP_CLIENTS))))

    started = time.monotonic()
    served = asyncio.run(clients())
    return served / (time.monotonic() - started)


def offered(url: str, api_key: str, rate: float, seconds: float, log: Path) -> dict[str, Any]:
    """h2load opening ``rate`` connections a second for ``seconds``, one request on each."""
    assert H2LOAD is not None
    # h2load's period is whole milliseconds: a few connections every 10 ms, or one less often.
    period_ms = 10 if rate >= 100 else round(1000 / rate)
    per_period = max(1, round(rate * period_ms / 1000))
    rate = per_period * 1000 / period_ms
    count = max(1, int(rate * seconds))
    command = [
        H2LOAD, "--h1", "-t", "1", "-c", str(count), "-n", str(count),
        "-r", str(per_period), "--rate-period", f"{period_ms}ms",
        "-T", str(CONNECTION_TIMEOUT_SECONDS), "-N", str(CONNECTION_TIMEOUT_SECONDS),
        "-H", f"Authorization: Token {api_key}", "--log-file", str(log),
        f"{url}/api/v1/receipts/",
    ]  # fmt: skip
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    elapsed = time.monotonic() - started
    by_status: dict[int, list[float]] = {}
    for line in log.read_text().splitlines():
        _start, status, micros = line.split("\t")
        by_status.setdefault(int(status), []).append(int(micros) / 1000)
    log.unlink()
    answered = sum(len(times) for times in by_status.values())
    connect = re.search(r"time for connect:\s+\S+\s+(\S+)", out)
    return {
        "offered_per_s": round(rate),
        "goodput_per_s": round(len(by_status.get(200, [])) / elapsed),
        "answers": {str(status): len(times) for status, times in sorted(by_status.items())}
        | ({"none": count - answered} if count > answered else {}),
        "p50_200_ms": percentile(by_status.get(200, []), 0.5),
        "p99_200_ms": percentile(by_status.get(200, []), 0.99),
        "p99_503_ms": percentile(by_status.get(503, []), 0.99),
        "slowest_connect": connect.group(1) if connect else None,
    }


def bench(kind: str, options: argparse.Namespace) -> dict[str, Any]:
    seconds = min(options.seconds, MAX_SECONDS)
    with kuitti_instance(kind) as (workdir, env, api_key, _url):
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        bounds = {f"bound_{options.max_wait}s": options.max_wait, "no_bound": NO_BOUND_SECONDS}
        with contextlib.ExitStack() as servers:
            urls = {name: servers.enter_context(serving(env, wait, workdir))
                    for name, wait in bounds.items()}  # fmt: skip
            for _ in range(RECEIPTS):
                posted = httpx.post(
                    f"{urls['no_bound']}/api/v1/receipts/",
                    json=receipt_doc(),
                    headers={"Authorization": f"Token {api_key}"},
                    timeout=30,
                )
                assert posted.status_code == 200, posted.text
            rate = capacity(urls["no_bound"], api_key, seconds)
            report: dict[str, Any] = {"capacity_per_s": round(rate), "rounds": []}
            log = workdir / "h2load.log"
            for _ in range(options.rounds):
                report["rounds"].append(
                    {
                        name: {
                            f"{factor}x": offered(
                                url, api_key, min(rate * factor, MAX_RATE), seconds, log
                            )
                            for factor in (0.25, 2, 5)
                        }
                        for name, url in urls.items()
                    }
                )
            return report


def line(name: str, load: str, run: dict[str, Any]) -> str:
    answers = " ".join(f"{status}:{count}" for status, count in run["answers"].items())
    return (
        f"  {name:<12} {load:>5} offered {run['offered_per_s']:>5}/s"
        f"  goodput {run['goodput_per_s']:>4}/s  200s p50 {run['p50_200_ms']} ms"
        f" p99 {run['p99_200_ms']} ms  503s p99 {run['p99_503_ms']} ms"
        f"  slowest connect {run['slowest_connect']}  answers {answers}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-wait", type=float, default=0.5, help="KUITTI_MAX_QUEUE_SECONDS")
    options = parser.parse_args()
    if H2LOAD is None:
        raise SystemExit("h2load is missing: apt-get install nghttp2-client")
    kinds = ["sqlite", "postgresql"] if options.database == "both" else [options.database]
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    for kind in kinds:
        report = bench(kind, options)
        print(f"{kind}: capacity {report['capacity_per_s']}/s", flush=True)
        for number, turn in enumerate(report["rounds"], 1):
            print(f" round {number}")
            for name, loads in turn.items():
                for load, run in loads.items():
                    print(line(name, load, run), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
