"""Ingest benchmark: receipts/s, p50/p99 latency and peak server RSS for ``POST
/api/v1/receipts/``, on SQLite and on PostgreSQL, beside the bare-framework ceiling measured in
the same run (a FastAPI app that only validates the same receipts; ``bench/bare_app.py``).

Receipts are realistic: 1–60 product rows, three VAT rates, a CARD payment with the full set of
terminal attributes. The load comes from ``wrk`` (Debian package ``wrk``; C, so the client takes
little of the machine's two cores) over real HTTP on loopback, with N concurrent connections.

    .venv/bin/python bench/ingest.py                      # both databases, 50 clients, 20 s
    .venv/bin/python bench/ingest.py --database sqlite --clients 50 --seconds 10 --workers 2

PostgreSQL runs use a fresh database made from KUITTI_TEST_POSTGRES_URL (default
postgresql://kuitti:kuitti@127.0.0.1:5432/postgres) and drop it afterwards.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.factories import card_payment, product_row, receipt_doc  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "KUITTI_TEST_POSTGRES_URL", "postgresql://kuitti:kuitti@127.0.0.1:5432/postgres"
)
BIN = Path(sys.executable).parent
RATES = ("25.5", "14", "10")
NAMES = ("Maito 1 l", "Ruisleipä", "Kahvi 500 g", "Banaani kg", "Juusto 400 g", "Omena kg")


@dataclass
class Result:
    name: str
    requests_per_second: float
    p50_ms: float
    p99_ms: float
    non_2xx: int
    peak_rss_mb: float

    def line(self) -> str:
        return (
            f"{self.name:<34} {self.requests_per_second:>9.0f} req/s   p50 {self.p50_ms:>6.1f} ms"
            f"   p99 {self.p99_ms:>6.1f} ms   peak RSS {self.peak_rss_mb:>6.0f} MB"
            f"   non-2xx {self.non_2xx}"
        )


def realistic_receipt(rng: random.Random, number: int) -> dict[str, Any]:
    rows = [
        product_row(
            rng.choice(NAMES),
            unit_price=rng.randint(49, 4999),
            quantity=rng.randint(1, 4),
            rate=rng.choice(RATES),
            EANCode=f"64{rng.randint(10**10, 10**11 - 1)}",
        )
        for _ in range(rng.randint(1, 60))
    ]
    doc = receipt_doc(rows, receiptNumber=f"B-{number:06d}")
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


def tree_rss_kb(pid: int) -> int:
    """Resident memory of a process and all its descendants, from /proc."""
    total = 0
    pending = [pid]
    while pending:
        current = pending.pop()
        try:
            status = Path(f"/proc/{current}/status").read_text()
            total += int(re.search(r"VmRSS:\s+(\d+)", status).group(1))  # type: ignore[union-attr]
            for task in Path(f"/proc/{current}/task").iterdir():
                children = (task / "children").read_text().split()
                pending.extend(int(c) for c in children)
        except (OSError, AttributeError):
            continue
    return total


class RssSampler(threading.Thread):
    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid = pid
        self.peak_kb = 0
        self.stopped = threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.1):
            self.peak_kb = max(self.peak_kb, tree_rss_kb(self.pid))


def wait_ready(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + 60
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


@contextmanager
def running(command: list[str], env: dict[str, str], ready_url: str, log: Path) -> Iterator[int]:
    with log.open("wb") as sink:
        process = subprocess.Popen(command, env=env, stdout=sink, stderr=sink)
    try:
        wait_ready(ready_url, process)
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


def run_wrk(url: str, script: Path, clients: int, seconds: int) -> tuple[float, float, float, int]:
    threads = min(2, clients)
    command = [
        "wrk",
        f"-t{threads}",
        f"-c{clients}",
        f"-d{seconds}s",
        "--latency",
        "-s",
        str(script),
    ]
    out = subprocess.run([*command, url], capture_output=True, text=True, check=True).stdout
    rps = float(re.search(r"Requests/sec:\s+([\d.]+)", out).group(1))  # type: ignore[union-attr]
    p50 = _latency_ms(out, "50%")
    p99 = _latency_ms(out, "99%")
    non_2xx_match = re.search(r"Non-2xx or 3xx responses:\s+(\d+)", out)
    return rps, p50, p99, int(non_2xx_match.group(1)) if non_2xx_match else 0


def _latency_ms(out: str, percentile: str) -> float:
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
) -> Result:
    base = f"http://127.0.0.1:{port}"
    ready = f"{base}/readyz" if "kuitti" in command[0] else f"{base}/healthz"
    with running(command, env, ready, workdir / f"{name.split()[0]}.log") as pid:
        run_wrk(f"{base}/api/v1/receipts/", script, args.clients, 3)  # warm-up
        sampler = RssSampler(pid)
        sampler.start()
        rps, p50, p99, non_2xx = run_wrk(
            f"{base}/api/v1/receipts/", script, args.clients, args.seconds
        )
        sampler.stopped.set()
        sampler.join()
    return Result(name, rps, p50, p99, non_2xx, sampler.peak_kb / 1024)


@contextmanager
def database(kind: str, workdir: Path) -> Iterator[str | None]:
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


def bench_kuitti(kind: str, script_bodies: list[bytes], args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory() as tmp, database(kind, Path(tmp)) as url:
        workdir = Path(tmp)
        env = {**os.environ, "KUITTI_VAR_DIR": str(workdir / "var"), "KUITTI_LOG_LEVEL": "INFO"}
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
        api_key = json.loads(created.stdout)["api_key"]
        script = workdir / "post.lua"
        wrk_script(script_bodies, api_key, script)
        port = free_port()
        command = [
            str(BIN / "kuitti"),
            "serve",
            "--port",
            str(port),
            "--workers",
            str(args.workers),
        ]
        return measure(
            f"kuitti on {kind} ({args.workers} proc)", command, env, port, script, args, workdir
        )


def bench_bare(script_bodies: list[bytes], args: argparse.Namespace) -> Result:
    with tempfile.TemporaryDirectory() as tmp:
        workdir = Path(tmp)
        script = workdir / "post.lua"
        wrk_script(script_bodies, "unused", script)
        port = free_port()
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [
            str(BIN / "uvicorn"), "bench.bare_app:app", "--port", str(port),
            "--workers", str(args.workers), "--log-level", "warning", "--no-access-log",
        ]  # fmt: skip
        return measure(
            f"bare FastAPI ({args.workers} proc)", command, env, port, script, args, workdir
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument("--seconds", type=int, default=20)
    parser.add_argument("--workers", type=int, default=1, help="server processes")
    parser.add_argument("--receipts", type=int, default=200, help="distinct bodies to send")
    parser.add_argument("--serve-args", default="", help="extra arguments for kuitti serve")
    args = parser.parse_args()
    if not shutil.which("wrk"):
        raise SystemExit("wrk is needed: apt-get install wrk")
    rng = random.Random(20260115)
    bodies = [json.dumps(realistic_receipt(rng, i)).encode() for i in range(args.receipts)]
    sizes = sorted(len(b) for b in bodies)
    print(
        f"{len(bodies)} receipts, body size median {sizes[len(sizes) // 2] / 1024:.1f} KB, "
        f"max {sizes[-1] / 1024:.1f} KB; {args.clients} clients, {args.seconds} s, "
        f"{os.cpu_count()} CPUs"
    )
    results = [bench_bare(bodies, args)]
    print(results[0].line(), flush=True)
    kinds = ["sqlite", "postgresql"] if args.database == "both" else [args.database]
    for kind in kinds:
        results.append(bench_kuitti(kind, bodies, args))
        print(results[-1].line(), flush=True)
    ceiling = results[0].requests_per_second
    for result in results[1:]:
        print(f"{result.name}: {100 * result.requests_per_second / ceiling:.0f} % of the ceiling")


if __name__ == "__main__":
    main()
