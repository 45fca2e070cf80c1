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

Every server is started first, then measured in turns: ``--rounds`` rounds (3 by default) of one
``--seconds`` slice each, every round beginning with the ceiling, and one last slice of the
ceiling at the end. The machine's speed drifts (other tenants of its host: a ceiling 10 % lower
makes every share 10 % higher), so a share is taken over the whole run, and each slice's is
given against the ceiling's slice just before and just after it. Before each slice the servers
and PostgreSQL are let finish what the last one left (a checkpoint, an autovacuum). p50 and p99
are over every request of a server's slices (from each slice's latency distribution).

CPU per receipt is the user+system CPU of the whole server process tree, read from /proc before
and after each measured slice, divided by the receipts the database gained (for the references,
by the requests answered). PostgreSQL's own CPU (the backends of the run's databases and the
server's shared processes, the same cores' work; not other sessions' databases on the same
server) is printed beside it, per stored receipt, and is not part of it.

Each server is measured once every one of its processes has finished starting (its process
tree's CPU stands still), then warmed up for 3 s. ``wrk`` keeps its connections for a whole
slice, so a process still starting when they open would serve few clients all along; each line
ends with how the clients' connections were split between the processes in each slice
(``clients 27+23, 30+20``) and with the disk's slowest sync during the slices
(``DiskSyncProbe``: what a PostgreSQL commit waits for, and on a virtual machine's disk
sometimes hundreds of milliseconds).

    .venv/bin/python bench/ingest.py                      # both databases, 2 processes, 50 clients
    .venv/bin/python bench/ingest.py --workers 1,2,4 --rounds 1
    .venv/bin/python bench/ingest.py --database sqlite --clients 50 --seconds 10
    .venv/bin/python bench/ingest.py --what-if    # and with parts made free (bench/what_if.py)
    .venv/bin/python bench/ingest.py --beside ../kuitti-before   # another tree in the same run

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
from collections.abc import Callable, Collection, Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.asgi import RUN_WORKER_ENV  # noqa: E402
from kuitti.protocols import HTTP_PROTOCOL  # noqa: E402
from tests.factories import card_payment, product_row, receipt_doc  # noqa: E402

sys.path.insert(0, str(ROOT / "bench"))
from signing import kuitti_figures, stored_documents  # noqa: E402  (bench/signing.py)

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
    splits: list[list[int]]
    """The clients' connections held by each server process, one second into each slice."""
    disk: str
    """The disk's slowest sync during the slices (``DiskSyncProbe``)."""
    postgres_cpu_ms_per_op: float
    """PostgreSQL's own CPU (the run's databases' and the shared processes') per operation."""

    def line(self) -> str:
        postgres = self.postgres_cpu_ms_per_op
        return (
            f"{self.name:<40} {self.requests_per_second:>7.0f} /s  p50 {self.p50_ms:>6.1f} ms"
            f"  p99 {self.p99_ms:>6.1f} ms  CPU {self.cpu_ms_per_op:>5.2f} ms/op"
            + (f" (PostgreSQL's {postgres:.2f})" if postgres >= 0.005 else "")
            + f"  RSS {self.peak_rss_mb:>4.0f} MB  non-2xx {self.non_2xx}"
            f"  clients {', '.join('+'.join(map(str, split)) for split in self.splits)}"
            f"  {self.disk}"
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


SHARED_POSTGRES = (
    "checkpointer",
    "background writer",
    "walwriter",
    "autovacuum launcher",
    "logical replication launcher",
    "archiver",
    "stats collector",
)
"""The titles of PostgreSQL's processes that serve no one database."""


OUR_DATABASES: set[str] = set()
"""The PostgreSQL databases this run made (``database``): the PostgreSQL CPU a bench reports is
their backends' and the server's shared processes' (``postgres_cpu_seconds``)."""


def postgres_cpu_seconds(databases: Collection[str] | None = None) -> float:
    """User + system CPU so far of PostgreSQL's server processes on this machine: all of them,
    or with ``databases`` only the backends and autovacuum workers of those databases and the
    processes the server shares (``SHARED_POSTGRES``: its WAL writer, checkpointer…). Other
    sessions' databases on the same server (a suite, a large fill) then do not count; a
    process that ended between two readings no longer counts at all, which made the figure of
    every process negative when another session's busy backend ended meanwhile."""
    ticks = 0
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            name, _, rest = stat.read_text().partition(" (")[2].rpartition(")")
            if name == "postgres" and databases is not None:
                title = (stat.parent / "cmdline").read_bytes().decode(errors="replace")
                if not _serves(title.replace("\0", " ").strip(), databases):
                    continue
        except OSError:
            continue
        if name == "postgres":
            fields = rest.split()
            ticks += int(fields[11]) + int(fields[12])  # utime, stime
    return ticks / os.sysconf("SC_CLK_TCK")


def _serves(title: str, databases: Collection[str]) -> bool:
    """Whether the process titled ``title`` (``postgres: 15/main: USER DATABASE HOST …``,
    ``… autovacuum worker DATABASE``, ``… walwriter``, or the postmaster's command line) serves
    one of ``databases`` or all."""
    if not title.startswith("postgres: "):
        return True  # the postmaster
    what = title.split(": ", 2)[-1]
    if what.startswith(SHARED_POSTGRES):
        return True
    words = what.removeprefix("autovacuum worker ").split()
    if what.startswith("autovacuum worker "):
        return bool(words) and words[0] in databases
    return len(words) > 1 and words[1] in databases


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

    @staticmethod
    def summary(latencies_ms: list[float]) -> str:
        """The slowest of these syncs, and how many took 100 ms or more."""
        latencies = sorted(latencies_ms) or [0.0]
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
    if not stands_still(lambda: tree_cpu_seconds(pid), within=60):
        raise SystemExit("the server's processes kept busy after it was ready")


def stands_still(cpu_seconds: Callable[[], float], *, within: float) -> bool:
    """Whether, within ``within`` seconds, ``cpu_seconds()`` grows by under a tenth of a core
    over half a second."""
    deadline = time.monotonic() + within
    before = cpu_seconds()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = cpu_seconds()
        if now - before < 0.05:
            return True
        before = now
    return False


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
{LATENCY_DONE}"""
    )


PERCENTILES = (
    [float(p) for p in range(1, 99)]
    + [round(99 + p / 10, 1) for p in range(10)]
    + [round(99.9 + p / 100, 2) for p in range(1, 10)]
    + [100.0]
)
"""Where each run's latency distribution is read: finer towards the tail, so that the p99 of
several runs together can be found from theirs (``merged_percentile``)."""
LATENCY_DONE = f"""
done = function(summary, latency, requests)
  for _, p in ipairs({{{", ".join(map(str, PERCENTILES))}}}) do
    local us = p < 100 and latency:percentile(p) or latency.max
    io.write(string.format("latency percentile %g %d\\n", p, us))
  end
end
"""
"""A ``done`` hook for wrk's script: the latency at each of ``PERCENTILES``, in microseconds."""


@dataclass
class WrkRun:
    requests: int
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    percentiles: list[tuple[float, float]] = field(default_factory=list)
    """(percentile, latency in ms) at each of ``PERCENTILES``, when the script printed them."""


def merged_percentile(runs: list[WrkRun], percentile: float) -> float:
    """The latency under which ``percentile`` % of all the runs' requests were answered, from
    each run's distribution (``PERCENTILES``): the smallest latency where the runs' shares at
    or under it, weighed by their requests, reach the percentile. Each run's share at a latency
    is the highest of its percentiles there, so the answer errs high, never low."""
    total = sum(run.requests for run in runs)
    candidates = sorted({ms for run in runs for _, ms in run.percentiles})
    for latency in candidates:
        under = sum(
            run.requests * max((p for p, ms in run.percentiles if ms <= latency), default=0.0)
            for run in runs
        )
        if under >= percentile * total:
            return latency
    return candidates[-1]


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
        [
            (float(p), int(us) / 1000)
            for p, us in re.findall(r"^latency percentile (\S+) (\d+)$", out, re.MULTILINE)
        ],
    )


def latency_ms(out: str, percentile: str) -> float:
    value, unit = re.search(rf"{percentile}\s+([\d.]+)(us|ms|s)", out).groups()  # type: ignore[union-attr]
    return float(value) * {"us": 0.001, "ms": 1.0, "s": 1000.0}[unit]


@dataclass
class Slice:
    """One measured ``wrk`` run against one server."""

    run: WrkRun
    cpu_seconds: float
    postgres_seconds: float
    operations: int
    split: list[int]
    disk_ms: list[float]
    peak_rss_kb: int


class Server:
    """A server under test, started once and kept running for the whole run, measured in
    slices that take turns with the other servers' (``main``)."""

    def __init__(
        self,
        name: str,
        pid: int,
        port: int,
        script: Path,
        workdir: Path,
        stored: Callable[[], int] | None,
    ) -> None:
        self.name, self.pid, self.port = name, pid, port
        self.script, self.workdir, self.stored = script, workdir, stored
        self.url = f"http://127.0.0.1:{port}/api/v1/receipts/"
        self.slices: list[Slice] = []

    def measure(self, args: argparse.Namespace) -> Slice:
        """One measured run; CPU is divided by ``stored()``'s growth if given, else by the
        requests answered."""
        sampler = RssSampler(self.pid)
        sampler.start()
        disk = DiskSyncProbe(self.workdir)
        disk.start()
        before_count = self.stored() if self.stored else 0
        before_cpu = tree_cpu_seconds(self.pid)
        postgres_before = postgres_cpu_seconds(OUR_DATABASES)
        split: list[int] = []
        probe = threading.Timer(1.0, lambda: split.extend(connection_split(self.pid, self.port)))
        probe.start()
        run = run_wrk(self.url, self.script, args.clients, args.seconds)
        probe.join()
        cpu = tree_cpu_seconds(self.pid) - before_cpu
        postgres = postgres_cpu_seconds(OUR_DATABASES) - postgres_before
        operations = self.stored() - before_count if self.stored else run.requests - run.non_2xx
        for thread in (sampler, disk):
            thread.stopped.set()
            thread.join()
        measured = Slice(run, cpu, postgres, operations, split, disk.latencies_ms, sampler.peak_kb)
        self.slices.append(measured)
        return measured

    def result(self) -> Result:
        """Every slice together: the rate over their whole time, p50 and p99 over all their
        requests."""
        runs = [s.run for s in self.slices]
        operations = max(sum(s.operations for s in self.slices), 1)
        seconds = sum(r.requests / r.requests_per_second for r in runs if r.requests_per_second)
        return Result(
            self.name,
            sum(r.requests for r in runs) / max(seconds, 1e-9),
            merged_percentile(runs, 50),
            merged_percentile(runs, 99),
            sum(r.non_2xx for r in runs),
            max(s.peak_rss_kb for s in self.slices) / 1024,
            1000 * sum(s.cpu_seconds for s in self.slices) / operations,
            [s.split for s in self.slices],
            DiskSyncProbe.summary([latency for s in self.slices for latency in s.disk_ms]),
            1000 * sum(s.postgres_seconds for s in self.slices) / operations,
        )


@contextmanager
def serving(
    name: str,
    command: list[str],
    env: dict[str, str],
    port: int,
    script: Path,
    args: argparse.Namespace,
    workdir: Path,
    stored: Callable[[], int] | None = None,
) -> Iterator[Server]:
    """A ``Server`` started, settled and warmed up (3 s of load), stopped after the block."""
    base = f"http://127.0.0.1:{port}"
    ready = f"{base}/readyz" if stored is not None else f"{base}/healthz"
    with running(command, env, ready, workdir / f"{name.split()[0]}.log") as pid:
        server = Server(name, pid, port, script, workdir, stored)
        run_wrk(server.url, script, args.clients, 3)
        yield server


def wait_quiet(servers: list[Server]) -> None:
    """Until the servers and PostgreSQL stand still: what one server left running after its
    slice (an SQLite checkpoint, PostgreSQL's autovacuum after thousands of inserts) would
    otherwise slow the next server's slice and flatter the one before."""

    def cpu_seconds() -> float:
        return sum(tree_cpu_seconds(s.pid) for s in servers) + postgres_cpu_seconds(OUR_DATABASES)

    if not stands_still(cpu_seconds, within=30):
        print("  (the servers were still busy 30 s after a slice; measuring anyway)", flush=True)


@contextmanager
def database(kind: str) -> Iterator[str | None]:
    if kind == "sqlite":
        yield None
        return
    name = f"kuitti_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    OUR_DATABASES.add(name)
    try:
        yield f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    finally:
        OUR_DATABASES.discard(name)
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
def kuitti_instance(
    kind: str, tree: Path = ROOT
) -> Iterator[tuple[Path, dict[str, str], str, str | None]]:
    """A fresh database with one merchant partner, made by the kuitti of ``tree``: (workdir,
    env, api key, database URL)."""
    with tempfile.TemporaryDirectory() as tmp, database(kind) as url:
        workdir = Path(tmp)
        env = {
            **os.environ,
            # This tree's kuitti (or ``tree``'s: ``--beside``), wherever the bench is started
            # from.
            "PYTHONPATH": str(tree),
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
    port: int,
    workers: int,
    serve_args: str,
    app: str = "kuitti.asgi:app_from_environment",
    tree: Path = ROOT,
) -> list[str]:
    """What ``kuitti serve --workers N --no-worker`` runs, with a longer worker health check:
    on a busy machine a worker's imports can outlast uvicorn's 5 s default and the supervisor
    then kills and respawns it for ever. ``app`` is the app factory (``bench/what_if.py``).
    The app is imported from this tree (or ``tree``): uvicorn's default ``--app-dir`` is the
    working directory, so a bench run from another checkout measured that checkout's code."""
    return [
        str(BIN / "uvicorn"), app, "--factory", "--app-dir", str(tree),
        "--port", str(port), "--workers", str(workers), *UVICORN_ARGS,
        # As ``kuitti serve`` (``service_cli.serve``): kuitti writes its own access line, and
        # its protocol bounds and sheds (``kuitti.edge``).
        "--no-access-log", "--proxy-headers", "--no-server-header", "--http", HTTP_PROTOCOL,
        *serve_args.split(),
    ]  # fmt: skip


WHAT_IF = {
    "without_writer": "no writer",
    "without_models": "no models",
    "without_either": "neither",
    "without_commit_wait": "early answer",
    "without_post": "framework only",
    "without_signing": "no signing",
}
"""``bench/what_if.py``'s factories and their labels."""


@contextmanager
def kuitti_server(
    kind: str,
    bodies: list[bytes],
    workers: int,
    args: argparse.Namespace,
    what_if: str | None = None,
    tree: Path = ROOT,
) -> Iterator[Server]:
    """kuitti on ``kind``, from this tree or from ``tree`` (``--beside``), with a part made free
    if ``what_if`` names one."""
    with kuitti_instance(kind, tree) as (workdir, env, api_key, url):
        script = workdir / "post.lua"
        wrk_script(bodies, api_key, script)
        port = free_port()
        app, label = "kuitti.asgi:app_from_environment", f"kuitti {kind}"
        if tree != ROOT:
            label = f"{label} {tree.name}"
        if what_if is not None:
            app, label = f"bench.what_if:{what_if}", f"{label}, {WHAT_IF[what_if]}"
        stores = what_if not in ("without_writer", "without_either", "without_post")
        with serving(
            f"{label} ({workers} proc)",
            kuitti_command(port, workers, args.serve_args, app, tree),
            env,
            port,
            script,
            args,
            workdir,
            # Without the writer, CPU is per answered post.
            stored=receipt_counter(url, workdir) if stores else None,
        ) as server:
            yield server


@contextmanager
def reference_server(
    app: str, label: str, bodies: list[bytes], workers: int, args: argparse.Namespace
) -> Iterator[Server]:
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
        with serving(f"{label} ({workers} proc)", command, env, port, script, args, workdir) as s:
            yield s


def shares(server: Server, ceiling: Server) -> tuple[float, float, float]:
    """``server``'s rate as a share of the ceiling's, in per cent: over the whole run, and the
    lowest and highest of each of its slices against the ceiling's slice just before and just
    after it (``main`` starts and ends every round with the ceiling)."""
    whole = 100 * server.result().requests_per_second / ceiling.result().requests_per_second
    each = [
        100 * measured.run.requests_per_second / around.run.requests_per_second
        for index, measured in enumerate(server.slices)
        for around in ceiling.slices[index : index + 2]
    ]
    return whole, min(each), max(each)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=10, help="of each measured slice")
    parser.add_argument(
        "--rounds", type=int, default=3, help="slices of each server, in turns with the others"
    )
    parser.add_argument("--workers", default="2", help="server processes, or a list such as 1,2,4")
    parser.add_argument("--rows", type=int, default=60, help="product rows (0: 1–60 at random)")
    parser.add_argument("--receipts", type=int, default=200, help="distinct bodies to send")
    parser.add_argument("--no-validating", action="store_true", help="skip the FastAPI reference")
    parser.add_argument(
        "--serve-args", default="", help="extra arguments for uvicorn serving kuitti"
    )
    parser.add_argument(
        "--what-if",
        nargs="?",
        const=",".join(WHAT_IF),
        metavar="NAMES",
        help="also kuitti without the writer, without Pydantic's models, without either, "
        "answering before the commit, without signing, and with nothing but the framework "
        "(bench/what_if.py): what each part costs a served post; or only those named "
        f"(comma-separated: {', '.join(WHAT_IF)})",
    )
    parser.add_argument(
        "--signing",
        action="store_true",
        help="also kuitti without signing (bench/what_if.py): what signing costs a served post",
    )
    parser.add_argument(
        "--beside",
        type=Path,
        action="append",
        default=[],
        help="also kuitti from this other tree (a checkout of an earlier commit, say: "
        "git worktree add --detach DIR COMMIT), in turns with this tree's in the same run",
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
        f"max {sizes[-1] / 1024:.1f} KB; {args.clients} clients, "
        f"{args.rounds} rounds of {args.seconds} s, "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start; "
        f"Python {platform.python_version()} from {sys.base_prefix}"
    )
    sign, verify = kuitti_figures(stored_documents(bodies))
    print(
        f"signing (bench/signing.py, in this process): {sign:.1f} µs CPU per receipt to sign "
        f"(goal ≤ 100), {verify:.1f} µs to verify (goal ≤ 1000)"
    )
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    for workers in [int(w) for w in args.workers.split(",")]:
        with ExitStack() as stack:
            ceiling = stack.enter_context(
                reference_server("parse_only", "parse-only", bodies, workers, args)
            )
            others = []
            if not args.no_validating:
                others.append(
                    stack.enter_context(
                        reference_server("validating", "FastAPI+validation", bodies, workers, args)
                    )
                )
            for kind in kinds:
                extra = args.what_if.split(",") if args.what_if else []
                if args.signing and "without_signing" not in extra:
                    extra.append("without_signing")
                for what_if in [None, *extra]:
                    others.append(
                        stack.enter_context(kuitti_server(kind, bodies, workers, args, what_if))
                    )
                for tree in args.beside:
                    others.append(
                        stack.enter_context(
                            kuitti_server(kind, bodies, workers, args, tree=tree.resolve())
                        )
                    )
            servers = [ceiling, *others]
            # Every round starts with the ceiling and the last ends with it: the machine's speed
            # drifts (other tenants of the host), and each slice then has a ceiling measured
            # just before and just after it.
            order = [server for _ in range(args.rounds) for server in servers] + [ceiling]
            for number, server in enumerate(order):
                wait_quiet(servers)
                measured = server.measure(args)
                run = measured.run
                print(
                    f"  slice {number + 1}/{len(order)}  {server.name:<38} "
                    f"{run.requests_per_second:>7.0f} /s  p99 {run.p99_ms:>6.1f} ms  "
                    f"clients {'+'.join(map(str, measured.split))}",
                    flush=True,
                )
            for server in servers:
                print(server.result().line())
            for server in others:
                whole, low, high = shares(server, ceiling)
                print(
                    f"  {server.name}: {whole:.1f} % of the parse-only ceiling "
                    f"(each slice against the ceiling's beside it: {low:.1f}–{high:.1f} %)"
                )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
