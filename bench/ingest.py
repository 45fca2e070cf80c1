"""Ingest benchmark: receipts/s, p50/p99, server CPU per stored receipt and peak RSS for ``POST
/api/v1/receipts/`` on SQLite and on PostgreSQL, beside two references measured in the same run
(``bench/bare_app.py``):

- the parse-only ceiling: Starlette reads the body, parses the JSON, answers 200 with a fresh id;
- FastAPI validating the receipt exactly as kuitti does (no authentication, database or logging).

Every server runs with the same number of processes (``--workers``; kuitti as ``kuitti serve
--workers N --no-worker`` runs it, through uvicorn with a longer
worker health check). Receipts are realistic: ``--rows`` product rows (60 by default, a
full grocery basket; 0 for 1–60 at random), three VAT rates, a CARD payment with the full set of
terminal attributes. The load comes from ``wrk`` (Debian package ``wrk``; C, so the client takes
little of the machine's cores) over real HTTP on loopback, with N concurrent connections.

The ceiling is measured first and again last, and each share is given against both (the
machine's speed drifts: a ceiling 10 % lower makes every share 10 % higher).

CPU per receipt is the user+system CPU of the whole server process tree, read from /proc before
and after the measured run, divided by the receipts the database gained (for the references, by
the requests answered). PostgreSQL's own CPU (every ``postgres`` process on the machine, the
same cores' work) is printed beside it, per stored receipt, and is not part of it.

Each server is measured once every one of its processes has finished starting (its process
tree's CPU stands still), then warmed up for 3 s. ``wrk`` keeps its connections for the whole
run, so a process still starting when they open would serve few clients all along; each line
ends with how the clients' connections were split between the processes (``clients 27+23``)
and with the disk's slowest sync during the run (``DiskSyncProbe``: what a PostgreSQL commit
waits for, and on a virtual machine's disk sometimes hundreds of milliseconds).

    .venv/bin/python bench/ingest.py                      # both databases, 2 processes, 50 clients
    .venv/bin/python bench/ingest.py --workers 1,2,4 --seconds 10
    .venv/bin/python bench/ingest.py --database sqlite --clients 50 --seconds 10
    .venv/bin/python bench/ingest.py --what-if    # and with parts made free (bench/what_if.py)

PostgreSQL runs use a fresh database made from KUITTI_TEST_POSTGRES_URL (default
postgresql://kuitti:kuitti@127.0.0.1:5432/postgres) and drop it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import re
import secrets
import shutil
import signal
import socket
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.asgi import RUN_WORKER_ENV  # noqa: E402
from tests.factories import card_payment, product_row, receipt_doc  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "KUITTI_TEST_POSTGRES_URL", "postgresql://kuitti:kuitti@127.0.0.1:5432/postgres"
)
BIN = Path(sys.executable).parent
RATES = ("25.5", "14", "10")
NAMES = ("Maito 1 l", "Ruisleipä", "Kahvi 500 g", "Banaani kg", "Juusto 400 g", "Omena kg")
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")
UVICORN_ARGS = ("--log-level", "warning", "--timeout-worker-healthcheck", "120")


@dataclass
class Result:
    name: str
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    peak_rss_mb: float
    cpu_ms_per_op: float
    split: list[int]
    """The clients' connections held by each server process, one second into the run."""
    disk: str
    """The disk's slowest sync during the run (``DiskSyncProbe.summary``)."""
    postgres_cpu_ms_per_op: float
    """PostgreSQL's own CPU (every server process on the machine) per operation."""

    def line(self) -> str:
        postgres = self.postgres_cpu_ms_per_op
        return (
            f"{self.name:<40} {self.requests_per_second:>7.0f} /s  p50 {self.p50_ms:>6.1f} ms"
            f"  p99 {self.p99_ms:>6.1f} ms  CPU {self.cpu_ms_per_op:>5.2f} ms/op"
            + (f" (PostgreSQL's {postgres:.2f})" if postgres >= 0.005 else "")
            + f"  RSS {self.peak_rss_mb:>4.0f} MB  non-2xx {self.non_2xx}"
            f"  clients {'+'.join(map(str, self.split))}  {self.disk}"
        )


def realistic_receipt(rng: random.Random, number: int, rows: int) -> dict[str, Any]:
    products = [
        product_row(
            rng.choice(NAMES),
            unit_price=rng.randint(49, 4999),
            quantity=rng.randint(1, 4),
            rate=rng.choice(RATES),
            EANCode=f"64{rng.randint(10**10, 10**11 - 1)}",
        )
        for _ in range(rows or rng.randint(1, 60))
    ]
    doc = receipt_doc(products, receiptNumber=f"B-{number:06d}")
    stamp = f"2026-01-15T{rng.randint(8, 21):02d}:{rng.randint(0, 59):02d}:00+02:00"
    doc["receiptTimeStamp"] = stamp
    doc["payments"] = [
        card_payment(
            doc["totalPriceIncVAT"],
            timeStamp=stamp,
            MID=f"MID-{rng.randint(1, 500):04d}",
            maskedPAN=f"415301******{rng.randint(0, 9999):04d}",
            authorizationCode=f"{rng.randint(0, 999999):06d}",
            referenceNumber=f"{rng.randint(0, 10**12):012d}",
            APP="VISA DEBIT",
            cardProgram="VISA",
            transactionRawText="KORTTIMAKSU\nVISA DEBIT\n************1234",
            ENTRY="CHIP",
            ARC="00",
            TVR="0000008000",
            TSI="E800",
            AID="A0000000031010",
            AC="7A1B2C3D4E5F6071",
            CID="40",
            cryptogramType="ARQC",
            CVM="PIN",
        )
    ]
    return doc


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def process_tree(pid: int) -> list[int]:
    """A process and all its descendants, from /proc."""
    found: list[int] = []
    pending = [pid]
    while pending:
        current = pending.pop()
        found.append(current)
        try:
            for task in Path(f"/proc/{current}/task").iterdir():
                pending.extend(int(c) for c in (task / "children").read_text().split())
        except OSError:
            continue
    return found


def tree_rss_kb(pid: int) -> int:
    total = 0
    for current in process_tree(pid):
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
        except (OSError, AttributeError):
            continue
    return total


def tree_cpu_seconds(pid: int) -> float:
    """User + system CPU of a process tree so far (live processes only)."""
    ticks = 0
    for current in process_tree(pid):
        try:
            fields = Path(f"/proc/{current}/stat").read_text().rpartition(")")[2].split()
        except OSError:
            continue
        ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / CLOCK_TICKS


def postgres_cpu_seconds() -> float:
    """User + system CPU of every PostgreSQL server process on this machine so far."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, _, rest = stat.read_text().partition(" (")[2].rpartition(")")
        except OSError:
            continue
        if name == "postgres":
            fields = rest.split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def connection_split(pid: int, port: int) -> list[int]:
    """How many established connections to ``port`` each process of the tree holds, most first
    (from the socket inodes in /proc/<pid>/fd and the kernel's table of TCP connections)."""
    established: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for row in Path(table).read_text().splitlines()[1:]:
            fields = row.split()
            if int(fields[1].rpartition(":")[2], 16) == port and fields[3] == "01":
                established.add(fields[9])  # the socket's inode
    held = [len(_socket_inodes(current) & established) for current in process_tree(pid)]
    return sorted((count for count in held if count), reverse=True)


def _socket_inodes(pid: int) -> set[str]:
    """The inodes of the sockets a process holds open (``socket:[inode]`` in /proc/<pid>/fd)."""
    inodes = set()
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return set()
    for descriptor in descriptors:
        try:
            target = str(descriptor.readlink())
        except OSError:
            continue  # closed meanwhile
        if target.startswith("socket:["):
            inodes.add(target[len("socket:[") : -1])
    return inodes


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            self.peak_kb = max(self.peak_kb, tree_rss_kb(self.pid))


class DiskSyncProbe(threading.Thread):
    """How long the disk takes to make 8 KB durable, every 20 ms while a run lasts: what a
    PostgreSQL commit waits for (``synchronous_commit = on`` flushes its WAL), measured apart
    from any server. A virtual machine's disk can stall for hundreds of milliseconds with
    nothing else running; a commit caught in a stall holds every post waiting for it, and the
    run's p99 shows it. The file is in ``directory``: the same disk as PostgreSQL's data on a
    machine with one disk, such as the standard one."""

    def __init__(self, directory: Path) -> None:
        super().__init__(daemon=True)
        self.path = directory / "disk-sync-probe"
        self.latencies_ms: list[float] = []
        self.stopped = threading.Event()

    def run(self) -> None:
        block, size = os.urandom(8192), 8192 * 64
        descriptor = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            # Written in full first, then overwritten in place, as PostgreSQL reuses its WAL
            # segments: a flush then has no file size or block map to journal.
            os.pwrite(descriptor, bytes(size), 0)
            os.fsync(descriptor)
            offset = 0
            while not self.stopped.wait(0.02):
                started = time.perf_counter()
                os.pwrite(descriptor, block, offset)
                os.fdatasync(descriptor)
                self.latencies_ms.append(1000 * (time.perf_counter() - started))
                offset = (offset + len(block)) % size
        finally:
            os.close(descriptor)
            self.path.unlink()

    def summary(self) -> str:
        latencies = sorted(self.latencies_ms) or [0.0]
        stalls = sum(latency >= 100 for latency in latencies)
        return f"disk sync max {latencies[-1]:.0f} ms, {stalls} over 100 ms"


def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 240  # imports are slow on a busy machine
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise SystemExit(f"server exited with {process.returncode}")
        try:
            if httpx.get(url, timeout=1).status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.1)
    raise SystemExit("server did not become ready")


def wait_settled(pid: int) -> None:
    """Until every process of the server has finished starting: its tree's CPU stands still.

    The first process to answer the readiness check is not the last to start. One still
    importing when ``wrk`` opens its connections takes few of them, and the same connections
    carry the whole run, so the measurement would be of one process serving most clients (a
    split of 46 to 4 was seen). Waiting until the tree is idle makes every run start even."""
    deadline = time.monotonic() + 60
    before = tree_cpu_seconds(pid)
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = tree_cpu_seconds(pid)
        if now - before < 0.05:  # under a tenth of a core over half a second
            return
        before = now
    raise SystemExit("the server's processes kept busy after it was ready")


@contextmanager
def running(command: list[str], env: dict[str, str], ready_url: str, log: Path) -> Iterator[int]:
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=sink)
    try:
        wait_ready(ready_url, process)
        wait_settled(process.pid)
        yield process.pid
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()


def wrk_script(bodies: list[bytes], api_key: str, path: Path) -> None:
    quoted = ",\n".join(json.dumps(b.decode()) for b in bodies)
    path.write_text(
        f"""
local bodies = {{
{quoted}
}}
local n = #bodies
local i = 0
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.headers["Authorization"] = "Token {api_key}"
request = function()
  i = i % n + 1
  return wrk.format(nil, nil, nil, bodies[i])
end
"""
    )


@dataclass
class WrkRun:
    requests: int
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int


def run_wrk(url: str, script: Path, clients: int, seconds: int) -> WrkRun:
    threads = min(2, clients)
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{clients}",
        f"-d{seconds}s",
        "--timeout",
        "10s",
        "--latency",
        "-s",
        str(script),
    ]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    return parse_wrk(out)


def parse_wrk(out: str) -> WrkRun:
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    requests = int(re.search(r"(\d+) requests in", out).group(1))  # type: ignore[union-attr]
    non_2xx_match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return WrkRun(
        requests,
        rps,
        latency_ms(out, "50%"),
        latency_ms(out, "99%"),
        int(non_2xx_match.group(1)) if non_2xx_match else 0,
    )


def latency_ms(out: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


def measure(
    name: str,
    command: list[str],
    env: dict[str, str],
    port: int,
    script: Path,
    args: argparse.Namespace,
    workdir: Path,
    stored: Callable[[], int] | None = None,
) -> Result:
    """Warm up, then one measured wrk run; CPU is divided by ``stored()``'s growth if given."""
    base = f"http://127.0.0.1:{port}"
    url = f"{base}/api/v1/receipts/"
    ready = f"{base}/readyz" if stored is not None else f"{base}/healthz"
    with running(command, env, ready, workdir / f"{name.split()[0]}.log") as pid:
        run_wrk(url, script, args.clients, 3)  # warm-up
        sampler = RssSampler(pid)
        sampler.start()
        disk = DiskSyncProbe(workdir)
        disk.start()
        before_count = stored() if stored else 0
        before_cpu, postgres_before = tree_cpu_seconds(pid), postgres_cpu_seconds()
        split: list[int] = []
        probe = threading.Timer(1.0, lambda: split.extend(connection_split(pid, port)))
        probe.start()
        run = run_wrk(url, script, args.clients, args.seconds)
        probe.join()
        cpu = tree_cpu_seconds(pid) - before_cpu
        postgres = postgres_cpu_seconds() - postgres_before
        operations = stored() - before_count if stored else run.requests - run.non_2xx
        for thread in (sampler, disk):
            thread.stopped.set()
            thread.join()
    return Result(
        name,
        run.requests_per_second,
        run.p50_ms,
        run.p99_ms,
        run.non_2xx,
        sampler.peak_kb / 1024,
        1000 * cpu / max(operations, 1),
        split,
        disk.summary(),
        1000 * postgres / max(operations, 1),
    )


@contextmanager
def database(kind: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield None
        return
    name = f"kuitti_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def receipt_counter(url: str | None, workdir: Path) -> Callable[[], int]:
    def count() -> int:
        if url is None:
            with sqlite3.connect(workdir / "var" / "kuitti.db") as connection:
                return int(connection.execute("SELECT count(*) FROM receipts").fetchone()[0])
        with psycopg.connect(url) as connection:
            row = connection.execute("SELECT count(*) FROM receipts").fetchone()
            assert row is not None
            return int(row[0])

    return count


@contextmanager
def kuitti_instance(kind: str) -> Iterator[tuple[Path, dict[str, str], str, str | None]]:
    """A fresh database with one merchant partner: (workdir, env, api key, database URL)."""
    with tempfile.TemporaryDirectory() as tmp, database(kind) as url:
        workdir = Path(tmp)
        env = {
            **os.environ,
            # This tree's kuitti, wherever the bench is started from (a worktree of an older
            # commit measured beside this one, say).
            "PYTHONPATH": str(ROOT),
            "KUITTI_VAR_DIR": str(workdir / "var"),
            "KUITTI_LOG_LEVEL": "INFO",
            RUN_WORKER_ENV: "0",
        }
        env.pop("KUITTI_DATABASE_URL", None)
        if url:
            env["KUITTI_DATABASE_URL"] = url
            subprocess.run([str(BIN / "kuitti"), "db", "upgrade"], env=env, check=True,
                           capture_output=True)  # fmt: skip
        created = subprocess.run(
            [str(BIN / "kuitti"), "partner", "create", "--name", "Bench", "--role", "merchant",
             "--json"],
            env=env, capture_output=True, check=True,
        )  # fmt: skip
        yield workdir, env, json.loads(created.stdout)["api_key"], url


def kuitti_command(
    port: int, workers: int, serve_args: str, app: str = "kuitti.asgi:app_from_environment"
) -> list[str]:
    """What ``kuitti serve --workers N --no-worker`` runs, with a longer worker health check:
    on a busy machine a worker's imports can outlast uvicorn's 5 s default and the supervisor
    then kills and respawns it for ever. ``app`` is the app factory (``bench/what_if.py``).
    The app is imported from this tree: uvicorn's default ``--app-dir`` is the working
    directory, so a bench run from another checkout measured that checkout's code."""
    return [
        str(BIN / "uvicorn"), app, "--factory", "--app-dir", str(ROOT),
        "--port", str(port), "--workers", str(workers), *UVICORN_ARGS,
        # As ``kuitti serve`` (``service_cli.serve``): kuitti writes its own access line.
        "--no-access-log", "--proxy-headers", "--no-server-header", *serve_args.split(),
    ]  # fmt: skip


WHAT_IF = {
    "without_writer": "no writer",
    "without_models": "no models",
    "without_either": "neither",
    "without_commit_wait": "early answer",
    "without_post": "framework only",
}
"""``bench/what_if.py``'s factories and their labels."""


def bench_kuitti(
    kind: str,
    bodies: list[bytes],
    workers: int,
    args: argparse.Namespace,
    what_if: str | None = None,
) -> Result:
    with kuitti_instance(kind) as (workdir, env, api_key, url):
        script = workdir / "post.lua"
        wrk_script(bodies, api_key, script)
        port = free_port()
        app, label = "kuitti.asgi:app_from_environment", f"kuitti {kind}"
        if what_if is not None:
            app, label = f"bench.what_if:{what_if}", f"{label}, {WHAT_IF[what_if]}"
        stores = what_if not in ("without_writer", "without_either", "without_post")
        return measure(
            f"{label} ({workers} proc)",
            kuitti_command(port, workers, args.serve_args, app),
            env,
            port,
            script,
            args,
            workdir,
            # Without the writer, CPU is per answered post.
            stored=receipt_counter(url, workdir) if stores else None,
        )


def bench_reference(
    app: str, label: str, bodies: list[bytes], workers: int, args: argparse.Namespace
) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        script = workdir / "post.lua"
        wrk_script(bodies, "unused", script)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [
            str(BIN / "uvicorn"), f"bench.bare_app:{app}", "--port", str(port),
            "--workers", str(workers), "--no-access-log", *UVICORN_ARGS,
        ]  # fmt: skip
        return measure(f"{label} ({workers} proc)", command, env, port, script, args, workdir)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--workers", default="2", help="server processes, or a list such as 1,2,4")
    parser.add_argument("--rows", type=int, default=60, help="product rows (0: 1–60 at random)")
    parser.add_argument("--receipts", type=int, default=200, help="distinct bodies to send")
    parser.add_argument("--no-validating", action="store_true", help="skip the FastAPI reference")
    parser.add_argument(
        "--serve-args", default="", help="extra arguments for uvicorn serving kuitti"
    )
    parser.add_argument(
        "--what-if",
        action="store_true",
        help="also kuitti without the writer, without Pydantic's models, without either, "
        "answering before the commit, and with nothing but the framework (bench/what_if.py): "
        "what each part costs a served post",
    )
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install wrk")
    rng = random.Random(20260115)
    bodies = [
        json.dumps(realistic_receipt(rng, i, args.rows)).encode() for i in range(args.receipts)
    ]
    sizes = sorted(len(b) for b in bodies)
    print(
        f"{len(bodies)} receipts, body size median {sizes[len(sizes) // 2] / 1024:.1f} KB, "
        f"max {sizes[-1] / 1024:.1f} KB; {args.clients} clients, {args.seconds} s, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
        f"Python {platform.python_version()} from {sys.base_prefix}"
    )
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    for workers in [int(w) for w in args.workers.split(",")]:
        ceiling = bench_reference("parse_only", "parse-only", bodies, workers, args)
        print(ceiling.line(), flush=True)
        results = []
        if not args.no_validating:
            results.append(
                bench_reference("validating", "FastAPI+validation", bodies, workers, args)
            )
            print(results[-1].line(), flush=True)
        for kind in kinds:
            for what_if in [None, *(WHAT_IF if args.what_if else ())]:
                results.append(bench_kuitti(kind, bodies, workers, args, what_if))
                print(results[-1].line(), flush=True)
        # The machine's speed drifts during a run (other tenants of the host): the ceiling is
        # measured again after the others, and each share is given against both measurements.
        ceiling_again = bench_reference("parse_only", "parse-only, again", bodies, workers, args)
        print(ceiling_again.line(), flush=True)
        ceilings = sorted(c.requests_per_second for c in (ceiling, ceiling_again))
        for result in results:
            low, high = (100 * result.requests_per_second / c for c in reversed(ceilings))
            print(f"  {result.name}: {low:.1f}–{high:.1f} % of the parse-only ceiling")
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
