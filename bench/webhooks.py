"""Webhook delivery benchmark: deliveries/s and end-to-end lag (event committed → partner
received), p50/p99, with one and two ``kuitti worker``-style processes, on SQLite and PostgreSQL.

Everything stays on loopback: ten partner endpoints are raw asyncio HTTP/1.1 servers in one
subprocess (uvloop when available, so the receivers take little of the machine), the workers are
separate processes running ``kuitti.worker.run_worker`` exactly as ``kuitti worker``
does, and this process writes the events through ``kuitti.webhooks.events.enqueue``.

Two phases per configuration:

* burst — 10,000 events written as fast as the database takes them (transactions of 200): the
  delivery rate is the throughput; lag includes the queue that builds up.
* steady — events at a fixed rate (default 500/s for 10 s, transactions of 10): the lag a partner
  sees when the service is not saturated.

    .venv/bin/python bench/webhooks.py                          # SQLite and PostgreSQL, 1 and 2
    .venv/bin/python bench/webhooks.py --database-url sqlite:///var/bench.db --workers 1
    .venv/bin/python bench/webhooks.py --database-url postgresql://kuitti:kuitti@127.0.0.1/x

Without ``--database-url`` SQLite uses a temporary file and PostgreSQL a fresh database made from
KUITTI_TEST_POSTGRES_URL (default postgresql://kuitti:kuitti@127.0.0.1:5432/postgres), dropped
afterwards. A given URL should name an empty scratch database. Every wait is bounded.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import secrets
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN_URL = os.environ.get(
    "KUITTI_TEST_POSTGRES_URL", "postgresql://kuitti:kuitti@127.0.0.1:5432/postgres"
)
SECRET = "bench-secret-key-" + "x" * 32
PHASE_TIMEOUT_SECONDS = 600.0
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (Linux ``/proc``), so figures taken on a busy machine
    can still be turned into a per-core capacity."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


# --------------------------------------------------------------------------- receivers process


def receivers_main(count: int) -> None:
    """Run ``count`` partner endpoints; talk to the parent over stdin/stdout:
    ``expect N`` → prints ``reached`` once N calls have arrived in total;
    ``dump`` → prints one JSON line {webhook-id: [receive times]} and forgets them."""
    try:
        import uvloop

        uvloop.install()
    except ImportError:
        pass

    received: dict[str, list[float]] = {}
    state = {"total": 0, "expect": -1}
    reached = asyncio.Event()

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await reader.readuntil(b"\r\n\r\n")
                length = 0
                webhook_id = ""
                for line in head.split(b"\r\n")[1:]:
                    name, _, value = line.partition(b":")
                    lowered = name.strip().lower()
                    if lowered == b"content-length":
                        length = int(value)
                    elif lowered == b"webhook-id":
                        webhook_id = value.strip().decode()
                if length:
                    await reader.readexactly(length)
                received.setdefault(webhook_id, []).append(time.time())
                state["total"] += 1
                if 0 <= state["expect"] <= state["total"]:
                    reached.set()
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:  # shutting down
            return
        finally:
            writer.close()

    async def control() -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while line := (await reader.readline()).decode().strip():
            if line.startswith("expect "):
                state["expect"] = int(line.split()[1])
                reached.clear()
                if state["total"] >= state["expect"]:
                    reached.set()
                await reached.wait()
                print("reached", flush=True)
            elif line == "dump":
                print(json.dumps(received), flush=True)
                received.clear()
                state["total"] = 0
                state["expect"] = -1

    async def main() -> None:
        servers = [await asyncio.start_server(handle, "127.0.0.1", 0) for _ in range(count)]
        ports = [s.sockets[0].getsockname()[1] for s in servers]
        print(json.dumps(ports), flush=True)
        await control()

    asyncio.run(main())


# --------------------------------------------------------------------------- worker process


def worker_main(use_uvloop: bool) -> None:
    """One ``kuitti worker`` (settings from KUITTI_* variables, the same entry point as the
    command); prints ``ready``."""
    from kuitti.clock import SystemClock
    from kuitti.config import load_settings
    from kuitti.db import Database
    from kuitti.services import Services
    from kuitti.worker import run_worker_process

    settings = load_settings()
    db = Database(settings.resolved_database_url, pool_size=settings.db_pool_size)
    services = Services(settings=settings, db=db, clock=SystemClock())
    print("ready", flush=True)
    profile_path = os.environ.get("KUITTI_BENCH_PROFILE")
    if profile_path:  # where the worker's event-loop thread spends its time
        import cProfile

        cProfile.runctx(
            "run_worker_process(services, use_uvloop=use_uvloop)",
            globals(),
            locals(),
            f"{profile_path}.{os.getpid()}",
        )
    else:
        run_worker_process(services, use_uvloop=use_uvloop)
    db.dispose()


# --------------------------------------------------------------------------- the benchmark


@dataclass
class PhaseResult:
    name: str
    events: int
    received: int
    duplicates: int
    seconds: float
    lags: list[float]
    worker_cpu_seconds: float
    write_seconds: float

    @property
    def cpu_per_delivery_ms(self) -> float:
        return self.worker_cpu_seconds / self.received * 1000 if self.received else float("nan")

    @property
    def rate(self) -> float:
        return self.received / self.seconds if self.seconds else 0.0

    def percentile(self, p: float) -> float:
        if not self.lags:
            return float("nan")
        ordered = sorted(self.lags)
        return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))]

    @property
    def written_rate(self) -> float:
        """Events committed per second: in the steady phase, check that the writer kept up with
        the rate asked for (on a loaded machine it may not, and the batches are then smaller)."""
        return self.events / self.write_seconds if self.write_seconds else 0.0

    def line(self) -> str:
        return (
            f"{self.name:<7} {self.events:>6} events  written {self.written_rate:>6.0f}/s  "
            f"{self.rate:>7.0f} deliveries/s  "
            f"lag p50 {self.percentile(50) * 1000:>6.0f} ms  p99 {self.percentile(99) * 1000:>6.0f}"
            f" ms  duplicates {self.duplicates}  worker CPU "
            f"{self.cpu_per_delivery_ms:.2f} ms/delivery"
        )


def _readline(stream: IO[str], timeout: float) -> str:
    result: list[str] = []
    reader = threading.Thread(target=lambda: result.append(stream.readline()), daemon=True)
    reader.start()
    reader.join(timeout)
    if not result:
        raise TimeoutError("no answer from a benchmark subprocess in time")
    return result[0].strip()


def _env(database_url: str, var_dir: Path) -> dict[str, str]:
    return {
        **os.environ,
        "KUITTI_DATABASE_URL": database_url,
        "KUITTI_SECRET_KEY": SECRET,
        "KUITTI_VAR_DIR": str(var_dir),
        "KUITTI_WEBHOOK_ALLOW_INSECURE": "true",
        "KUITTI_LOG_LEVEL": "ERROR",
        "PYTHONPATH": str(ROOT),
    }


def run_configuration(
    database_url: str,
    workers: int,
    events: int,
    steady_rate: int,
    steady_seconds: float,
    use_uvloop: bool,
) -> list[PhaseResult]:
    from kuitti.clock import SystemClock
    from kuitti.config import Settings
    from kuitti.db import Database
    from kuitti.dbmigrate import upgrade
    from kuitti.models import PartnerRole
    from kuitti.partners.service import create_partner
    from kuitti.security import SecretBox
    from kuitti.services import Services
    from kuitti.webhooks.events import enqueue
    from kuitti.webhooks.payloads import ReceiptNotification

    var_dir = Path(tempfile.mkdtemp(prefix="kuitti-bench-"))
    settings = Settings(
        database_url=database_url,
        var_dir=var_dir,
        secret_key=SECRET,
        webhook_allow_insecure=True,
        log_level="ERROR",
    )
    db = Database(settings.resolved_database_url, pool_size=4)
    upgrade(db)
    services = Services(settings=settings, db=db, clock=SystemClock())
    env = _env(database_url, var_dir)
    python = sys.executable
    receivers = subprocess.Popen(
        [python, __file__, "--receivers-process", "10"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    worker_procs: list[subprocess.Popen[str]] = []
    try:
        assert receivers.stdout is not None
        assert receivers.stdin is not None
        ports = json.loads(_readline(receivers.stdout, 30))
        box = SecretBox(SECRET)
        with services.db.session() as session:
            partners = [
                create_partner(
                    session,
                    box,
                    name=f"Bench partner {i}",
                    roles=[PartnerRole.APP],
                    now=services.clock.now(),
                    webhook_url=f"http://127.0.0.1:{port}/hooks/kuitti",
                    allow_insecure_webhooks=True,
                ).partner
                for i, port in enumerate(ports)
            ]
        for _ in range(workers):
            proc = subprocess.Popen(
                [python, __file__, "--worker-process", *(["--uvloop"] if use_uvloop else [])],
                stdout=subprocess.PIPE,
                text=True,
                env=env,
            )
            worker_procs.append(proc)
            assert proc.stdout is not None
            if _readline(proc.stdout, 60) != "ready":
                raise RuntimeError("a worker did not start")
        time.sleep(0.5)  # let the workers reach their first idle wait

        def write(count: int, batch: int, rate: float | None) -> dict[str, float]:
            committed: dict[str, float] = {}
            started = time.perf_counter()
            written = 0
            while written < count:
                if rate:
                    due = started + written / rate
                    pause = due - time.perf_counter()
                    if pause > 0:
                        time.sleep(pause)
                ids = []
                with services.db.session() as session:
                    for _ in range(min(batch, count - written)):
                        partner = partners[written % len(partners)]
                        payload = ReceiptNotification(
                            service_id=uuid.uuid4(), receipt_id=uuid.uuid4()
                        )
                        delivery = enqueue(
                            session,
                            partner,
                            payload,
                            now=services.clock.now(),
                        )
                        assert delivery is not None
                        ids.append(str(delivery.id))
                        written += 1
                at = time.time()
                for delivery_id in ids:
                    committed[delivery_id] = at
            return committed

        def phase(name: str, count: int, batch: int, rate: float | None) -> PhaseResult:
            assert receivers.stdin is not None
            assert receivers.stdout is not None
            receivers.stdin.write(f"expect {count}\n")
            receivers.stdin.flush()
            cpu_before = sum(cpu_seconds(p.pid) for p in worker_procs)
            write_started = time.perf_counter()
            committed = write(count, batch, rate)
            write_seconds = time.perf_counter() - write_started
            _readline(receivers.stdout, PHASE_TIMEOUT_SECONDS)
            worker_cpu = sum(cpu_seconds(p.pid) for p in worker_procs) - cpu_before
            receivers.stdin.write("dump\n")
            receivers.stdin.flush()
            got: dict[str, list[float]] = json.loads(_readline(receivers.stdout, 60))
            lags = [min(times) - committed[i] for i, times in got.items() if i in committed]
            first_commit = min(committed.values())
            last_receive = max(max(times) for times in got.values())
            duplicates = sum(len(times) - 1 for times in got.values())
            return PhaseResult(
                name,
                count,
                len(got),
                duplicates,
                last_receive - first_commit,
                lags,
                worker_cpu,
                write_seconds,
            )

        results = [phase("burst", events, 200, None)] if events else []
        steady_events = int(steady_rate * steady_seconds)
        if steady_events:
            results.append(phase("steady", steady_events, 10, steady_rate))
        return results
    finally:
        for proc in worker_procs:
            proc.send_signal(signal.SIGTERM)
        for proc in worker_procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
        if receivers.stdin is not None:
            receivers.stdin.close()
        try:
            receivers.wait(timeout=10)
        except subprocess.TimeoutExpired:
            receivers.kill()
        db.dispose()


def _scratch_postgres() -> tuple[str, str]:
    import psycopg

    name = f"kuitti_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    return f"{base}/{name}", name


def _drop_postgres(name: str) -> None:
    import psycopg

    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database-url", help="One database to use (default: both, scratch).")
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--workers", type=int, action="append", help="Worker processes (1, 2).")
    parser.add_argument(
        "--events", type=int, default=10_000, help="Events in the burst phase (0: steady only)."
    )
    parser.add_argument("--steady-rate", type=int, default=500, help="Events/s, steady phase.")
    parser.add_argument("--steady-seconds", type=float, default=10.0)
    parser.add_argument("--json", action="store_true", help="Also print the figures as JSON.")
    parser.add_argument(
        "--asyncio-loop",
        action="store_true",
        help="Workers on asyncio's own event loop instead of uvloop (which kuitti worker uses).",
    )
    parser.add_argument("--uvloop", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--receivers-process", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--worker-process", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receivers_process:
        receivers_main(args.receivers_process)
        return
    if args.worker_process:
        worker_main(args.uvloop)  # the parent passes --uvloop unless --asyncio-loop
        return

    sys.path.insert(0, str(ROOT))
    worker_counts = args.workers or [1, 2]
    print(f"load average at start: {os.getloadavg()}")
    print(
        f"machine: {os.cpu_count()} cores, {platform.processor() or platform.machine()}, "
        f"Python {platform.python_version()}, {platform.system()} {platform.release()}"
    )
    summary: list[dict[str, Any]] = []
    targets: list[tuple[str, str | None]] = []
    if args.database_url:
        targets.append(("given", args.database_url))
    else:
        if args.database in ("sqlite", "both"):
            targets.append(("sqlite", None))
        if args.database in ("postgresql", "both"):
            targets.append(("postgresql", None))
    for label, url in targets:
        for workers in worker_counts:
            scratch: str | None = None
            if url is None and label == "sqlite":
                run_url = f"sqlite:///{tempfile.mkdtemp(prefix='kuitti-bench-db-')}/bench.db"
            elif url is None:
                run_url, scratch = _scratch_postgres()
            else:
                run_url = url
            kind = "postgresql" if run_url.startswith("postgres") else "sqlite"
            try:
                results = run_configuration(
                    run_url,
                    workers,
                    args.events,
                    args.steady_rate,
                    args.steady_seconds,
                    not args.asyncio_loop,
                )
            finally:
                if scratch:
                    _drop_postgres(scratch)
            print(f"\n{kind}, {workers} worker(s); load average now {os.getloadavg()[0]:.1f}")
            for result in results:
                print("  " + result.line())
                summary.append(
                    {
                        "database": kind,
                        "workers": workers,
                        "phase": result.name,
                        "events": result.events,
                        "written_per_second": round(result.written_rate),
                        "received": result.received,
                        "duplicates": result.duplicates,
                        "deliveries_per_second": round(result.rate),
                        "lag_p50_ms": round(result.percentile(50) * 1000),
                        "lag_p99_ms": round(result.percentile(99) * 1000),
                        "worker_cpu_ms_per_delivery": round(result.cpu_per_delivery_ms, 3),
                    }
                )
    if args.json:
        print(json.dumps({"results": summary}))


if __name__ == "__main__":
    main()
