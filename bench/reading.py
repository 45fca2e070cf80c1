"""Reading benchmark: ``GET /api/v1/receipts/<id>/service_json/`` and the list endpoint at a fixed
request rate, on SQLite and on PostgreSQL; p50/p99 latency and server CPU per request (and the
database server's and the load generator's, which share the two cores).

The load generator is this script: an open-loop, fixed-rate client on asyncio and aiohttp (wrk
holds a fixed number of connections busy instead, and wrk2, which keeps a rate, is not packaged
by Debian). Request i is due at ``start + i / rate``; its latency runs from that due time, not
from when it was sent, so a server that falls behind is charged for the wait (no coordinated
omission). At most ``--connections`` requests are in flight; the achieved rate is printed beside
the target, and a run that could not keep the rate says so. The client is Python and takes CPU
from the same two cores, so the achieved rate is also printed for a trivial endpoint
(``/healthz``) as the reference measured in the same run; its garbage collector is paused while
it measures (``collector_paused``), so its own pauses are not charged to the server.

The server is kuitti with ``--workers`` processes (no in-process delivery worker), holding
``--receipts`` 60-row receipts posted by one merchant partner, who reads them.

    .venv/bin/python bench/reading.py                          # both databases, 1,000 req/s, 10 s
    .venv/bin/python bench/reading.py --database sqlite --rate 500 --seconds 5
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import os
import random
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import (  # noqa: E402  (bench/ is the script's own directory)
    OUR_DATABASES,
    free_port,
    kuitti_command,
    kuitti_instance,
    postgres_cpu_seconds,
    realistic_receipt,
    running,
    tree_cpu_seconds,
)


@dataclass
class RateRun:
    name: str
    target_rate: float
    achieved_rate: float
    p50_ms: float
    p99_ms: float
    errors: int
    cpu_ms_per_request: float
    postgres_ms_per_request: float
    client_ms_per_request: float

    def line(self) -> str:
        return (
            f"{self.name:<28} target {self.target_rate:>5.0f}/s"
            f"  achieved {self.achieved_rate:>5.0f}/s"
            f"  p50 {self.p50_ms:>7.1f} ms  p99 {self.p99_ms:>7.1f} ms"
            f"  CPU {self.cpu_ms_per_request:>5.2f} ms/req"
            f" (PostgreSQL's {self.postgres_ms_per_request:>4.2f},"
            f" the client's {self.client_ms_per_request:>4.2f})  errors {self.errors}"
        )


async def fixed_rate(
    base: str, paths: Callable[[int], str], headers: dict[str, str], rate: float, seconds: float,
    connections: int,
) -> tuple[list[float], int, float]:  # fmt: skip
    """Latencies (ms, from each request's due time), error count, wall seconds taken."""
    total = int(rate * seconds)
    latencies: list[float] = []
    errors = 0
    slots = asyncio.Semaphore(connections)
    connector = aiohttp.TCPConnector(limit=connections)
    async with aiohttp.ClientSession(base, connector=connector, headers=headers) as http:
        start = time.perf_counter()

        async def one(index: int) -> None:
            nonlocal errors
            due = start + index / rate
            async with slots:
                try:
                    async with http.get(paths(index)) as answer:
                        await answer.read()
                        if answer.status != 200:
                            errors += 1
                except aiohttp.ClientError:
                    errors += 1
            latencies.append((time.perf_counter() - due) * 1000)

        tasks = []
        for index in range(total):
            delay = start + index / rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            tasks.append(asyncio.create_task(one(index)))
        await asyncio.gather(*tasks)
        return latencies, errors, time.perf_counter() - start


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """The load generator's own cyclic garbage collector off while it measures: with ten thousand
    requests' tasks alive, a full collection paused this client's event loop for 40–60 ms, and
    every request due meanwhile was charged for it (the servers' p99 at 1,000/s read 42–98 ms,
    ``/healthz``'s 35–64 ms; with the client's collector off, 2.3–3.2 ms). A load generator in C
    has no such pauses; the servers keep their own collector."""
    gc.collect()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.enable()
        gc.unfreeze()


def run_at_rate(
    name: str, pid: int, base: str, paths: Callable[[int], str], headers: dict[str, str],
    args: argparse.Namespace,
) -> RateRun:  # fmt: skip
    asyncio.run(fixed_rate(base, paths, headers, args.rate, 2, args.connections))  # warm-up
    before, postgres_before = tree_cpu_seconds(pid), postgres_cpu_seconds(OUR_DATABASES)
    client_before = time.process_time()
    with collector_paused():
        latencies, errors, wall = asyncio.run(
            fixed_rate(base, paths, headers, args.rate, args.seconds, args.connections)
        )
    cpu = tree_cpu_seconds(pid) - before
    postgres = postgres_cpu_seconds(OUR_DATABASES) - postgres_before
    client = time.process_time() - client_before
    return RateRun(
        name,
        args.rate,
        len(latencies) / wall,
        percentile(latencies, 0.50),
        percentile(latencies, 0.99),
        errors,
        1000 * cpu / max(len(latencies), 1),
        1000 * postgres / max(len(latencies), 1),
        1000 * client / max(len(latencies), 1),
    )


def bench(kind: str, args: argparse.Namespace) -> list[RateRun]:
    rng = random.Random(20260115)
    with kuitti_instance(kind) as (workdir, env, api_key, url):
        port = free_port()
        base = f"http://127.0.0.1:{port}"
        command = kuitti_command(port, args.workers, "")
        with running(command, env, f"{base}/readyz", workdir / "server.log") as pid:
            headers = {"Authorization": f"Token {api_key}"}
            ids = []
            with httpx.Client(base_url=base, headers=headers, timeout=60) as http:
                for number in range(args.receipts):
                    answer = http.post("/api/v1/receipts/", json=realistic_receipt(rng, number, 60))
                    answer.raise_for_status()
                    ids.append(answer.json()["receipt_id"])
            if url is not None:
                # Statistics for the planner, as autovacuum gathers them within a minute of a
                # bulk load: on a table it has never analysed, PostgreSQL sorts a partner's
                # every grant to list a page instead of walking the listing index.
                with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as admin:
                    admin.execute("ANALYZE")
            label = f"{kind} ({args.workers} proc)"
            return [
                run_at_rate(f"healthz {label}", pid, base, lambda i: "/healthz", {}, args),
                run_at_rate(
                    f"service_json {label}",
                    pid,
                    base,
                    lambda i: f"/api/v1/receipts/{ids[i % len(ids)]}/service_json/",
                    headers,
                    args,
                ),
                run_at_rate(
                    f"list {label}", pid, base, lambda i: "/api/v1/receipts/", headers, args
                ),
            ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--rate", type=float, default=1000, help="requests per second")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--connections", type=int, default=50, help="most requests in flight")
    parser.add_argument("--workers", type=int, default=2, help="server processes")
    parser.add_argument("--receipts", type=int, default=300, help="receipts to read")
    args = parser.parse_args()
    print(
        f"{args.rate:.0f} req/s for {args.seconds:.0f} s, at most {args.connections} in flight, "
        f"{args.receipts} receipts; {os.cpu_count()} CPUs, load average "
        f"{os.getloadavg()[0]:.2f} at start"
    )
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    for kind in kinds:
        for result in bench(kind, args):
            print(result.line(), flush=True)
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
