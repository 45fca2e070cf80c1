"""Overload: a real ``kuitti serve`` (one process) offered more requests than it can serve, with
and without its bounds (the wait, ``KUITTI_MAX_QUEUE_SECONDS`` and ``KUITTI_QUEUE_TARGET_SECONDS``;
the requests in flight, ``KUITTI_MAX_REQUESTS_IN_FLIGHT``; the read pool's wait), on SQLite and on
PostgreSQL.

    .venv/bin/python bench/overload.py [--database both] [--seconds 10] [--rounds 2]
                                       [--max-wait 0.5] [--design NAME:KUITTI_X=1,...]
                                       [--refusals] [--closed 50]

Each request is a merchant's receipt list (``GET /api/v1/receipts/``, 20 receipts) on a new
connection. Two servers run on the same database: one with the default bounds (``--max-wait``)
and one whose bounds are out of reach (a wait of an hour, a million requests in flight: none, as
before the bounds); ``--design`` adds more, each with its own settings (``PYTHONPATH=`` another
tree's copy of ``kuitti`` measures other code beside this). They are measured in turns, round
after round, so the other work on a shared machine falls on all alike.

1. Capacity, measured by the load generator itself, against the server without the bounds: the
   highest rate (bisection, ``PROBES`` runs of ``PROBE_SECONDS``) at which every request is
   answered 200 and the p99 stays under ``KEEPS_UP_MS``. Closed-loop Python clients on the same
   two cores took CPU from the server and measured a third too little.
2. Unloaded: a quarter of capacity, open loop; the p99 of the answers.
3. Offered load at 2x and 5x capacity, open loop, for ``--seconds`` each.

``--refusals`` measures instead what a refusal costs: each bounded server again with one request
in flight allowed and one held, offered ``REFUSAL_RATE`` connections a second, every one refused.
``--closed 50`` measures how many requests of 50 keep-alive clients at full speed, each sending
its next request on its answer (a full pipeline, as ``bench/ingest.py`` runs, not overload), the
bounds refuse.

The open-loop load is h2load's (``nghttp2-client``, in C: a Python generator on the same two
cores lagged behind its own schedule by seconds): it opens connections at a fixed rate whatever
the answers, one request on each. Per server and load it prints the goodput (200s per second of
the whole run, until the last answer), the answers by status, the p50/p99 of the 200s and the
p99 of the 503s in milliseconds (from the request's sending, after the connection opened), the
slowest connection's opening (a full accept queue drops connections, which the kernel then
retries after a second or more), and the server process's CPU per answer (microseconds; 503s
and 200s together). Loopback only; at most 60 s a phase and ``MAX_RATE`` connections a second.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any, NamedTuple

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import (  # noqa: E402  (bench/ is the script's own)
    free_port,
    kuitti_instance,
    running,
    tree_cpu_seconds,
)

from tests.factories import receipt_doc  # noqa: E402

KUITTI = str(Path(sys.executable).parent / "kuitti")
H2LOAD = shutil.which("h2load")
MAX_SECONDS = 60
MAX_RATE = 6000
NO_BOUND = {
    "KUITTI_MAX_QUEUE_SECONDS": "3600",
    "KUITTI_QUEUE_TARGET_SECONDS": "3600",
    "KUITTI_MAX_REQUESTS_IN_FLIGHT": "1000000",
}
RECEIPTS = 20
CONNECTION_TIMEOUT_SECONDS = 60
PROBES = 6
PROBE_SECONDS = 3.0
KEEPS_UP_MS = 100.0
LOWEST_RATE = 50.0
REFUSAL_RATE = 2000.0
REFUSAL_SECONDS = 3.0
CLOSED_REQUESTS = 15_000


def percentile(samples: list[float], share: float) -> float | None:
    if not samples:
        return None
    ordered = sorted(samples)
    return round(ordered[min(len(ordered) - 1, int(len(ordered) * share))], 1)


@contextlib.contextmanager
def serving(env: dict[str, str], bounds: dict[str, str], workdir: Path) -> Iterator[Server]:
    """``kuitti serve`` with ``bounds`` (KUITTI_ variables) besides ``env``."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server_env = {**env, "KUITTI_PUBLIC_URL": url, "KUITTI_LOG_LEVEL": "WARNING", **bounds}
    command = [KUITTI, "serve", "--port", str(port), "--no-worker"]
    with running(command, server_env, f"{url}/readyz", workdir / f"serve-{port}.log") as pid:
        yield Server(url, pid)


class Server(NamedTuple):
    url: str
    pid: int


def capacity(server: Server, api_key: str, log: Path) -> tuple[float, list[str]]:
    """The highest rate at which ``server`` keeps up, open loop: every request answered 200,
    the p99 under ``KEEPS_UP_MS`` (a queue that grows for ``PROBE_SECONDS`` at a few per cent
    past capacity exceeds it). Bisection between ``LOWEST_RATE`` and ``MAX_RATE``; the probes'
    lines too."""
    low, high = LOWEST_RATE, float(MAX_RATE)
    probes = []
    for _ in range(PROBES):
        rate = (low + high) / 2
        run = offered(server, api_key, rate, PROBE_SECONDS, log)
        kept_up = set(run["answers"]) == {"200"} and (run["p99_200_ms"] or 0) < KEEPS_UP_MS
        probes.append(line("probe", "ok" if kept_up else "behind", run))
        low, high = (rate, high) if kept_up else (low, rate)
    return low, probes


def offered(server: Server, api_key: str, rate: float, seconds: float, log: Path) -> dict[str, Any]:
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
        f"{server.url}/api/v1/receipts/",
    ]  # fmt: skip
    cpu = tree_cpu_seconds(server.pid)
    started = time.monotonic()
    out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    elapsed = time.monotonic() - started
    cpu = tree_cpu_seconds(server.pid) - cpu
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
        "cpu_us_per_answer": round(cpu / max(answered, 1) * 1e6),
    }


def bench(kind: str, options: argparse.Namespace) -> dict[str, Any]:
    seconds = min(options.seconds, MAX_SECONDS)
    with kuitti_instance(kind) as (workdir, env, api_key, _url):
        env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
        bounds = {
            f"bound_{options.max_wait}s": {"KUITTI_MAX_QUEUE_SECONDS": str(options.max_wait)},
            "no_bound": NO_BOUND,
        }
        for design in options.design:
            name, _, settings = design.partition(":")
            bounds[name] = dict(part.split("=", 1) for part in settings.split(",") if part)
        with contextlib.ExitStack() as stack:
            servers = {name: stack.enter_context(serving(env, bound, workdir))
                       for name, bound in bounds.items()}  # fmt: skip
            for _ in range(RECEIPTS):
                posted = httpx.post(
                    f"{servers['no_bound'].url}/api/v1/receipts/",
                    json=receipt_doc(),
                    headers={"Authorization": f"Token {api_key}"},
                    timeout=30,
                )
                assert posted.status_code == 200, posted.text
            log = workdir / "h2load.log"
            if options.refusals:
                return {"refusals": refusal_costs(env, bounds, api_key, workdir, options)}
            if options.closed:
                return {"closed": closed_loops(servers, api_key, options)}
            rate, probes = capacity(servers["no_bound"], api_key, log)
            report: dict[str, Any] = {"capacity_per_s": round(rate), "probes": probes}
            report["rounds"] = []
            for _ in range(options.rounds):
                report["rounds"].append(
                    {
                        name: {
                            f"{factor}x": offered(
                                server, api_key, min(rate * factor, MAX_RATE), seconds, log
                            )
                            for factor in (0.25, 2, 5)
                        }
                        for name, server in servers.items()
                    }
                )
            return report


def refusal_costs(
    env: dict[str, str],
    bounds: dict[str, dict[str, str]],
    api_key: str,
    workdir: Path,
    options: argparse.Namespace,
) -> list[dict[str, Any]]:
    """The process's CPU per refusal: each bounded server again with one request in flight
    allowed and one held (a post whose body is not sent), offered ``REFUSAL_RATE`` connections a
    second for ``REFUSAL_SECONDS``, every one refused; in turns, ``--rounds`` times."""
    runs = []
    log = workdir / "h2load.log"
    for _ in range(options.rounds):
        for name, bound in bounds.items():
            if bound is NO_BOUND:
                continue
            with serving(env, {**bound, "KUITTI_MAX_REQUESTS_IN_FLIGHT": "1"}, workdir) as server:
                host, port = server.url.removeprefix("http://").split(":")
                with socket.create_connection((host, int(port)), timeout=60) as held:
                    held.sendall(
                        b"POST /api/v1/receipts/ HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n"
                        b"Content-Type: application/json\r\nExpect: 100-continue\r\n\r\n"
                    )
                    assert held.recv(100).startswith(b"HTTP/1.1 100 "), "not held in flight"
                    run = offered(server, api_key, REFUSAL_RATE, REFUSAL_SECONDS, log)
                runs.append({"design": name} | run)
    return runs


def closed_loops(
    servers: dict[str, Server], api_key: str, options: argparse.Namespace
) -> list[str]:
    """``--closed`` keep-alive clients, each sending its next request on its answer (a full
    pipeline, not overload: the bounds should refuse few), ``CLOSED_REQUESTS`` requests in all,
    against each server in turns; a line each with the answers by status."""
    assert H2LOAD is not None
    lines = []
    for _ in range(options.rounds):
        for name, server in servers.items():
            command = [
                H2LOAD, "--h1", "-t", "1", "-c", str(options.closed), "-n", str(CLOSED_REQUESTS),
                "-H", f"Authorization: Token {api_key}", f"{server.url}/api/v1/receipts/",
            ]  # fmt: skip
            out = subprocess.run(command, capture_output=True, text=True, check=True).stdout
            codes = re.search(r"status codes: (.*)", out)
            rate = re.search(r"finished in \S+, (\S+) req/s", out)
            per_second = rate.group(1) if rate else "?"
            lines.append(
                f"  {name:<12} {options.closed} clients: {per_second} answers/s,"
                f" {codes.group(1) if codes else '?'}; load average {os.getloadavg()[0]:.1f}"
            )
    return lines


def line(name: str, load: str, run: dict[str, Any]) -> str:
    answers = " ".join(f"{status}:{count}" for status, count in run["answers"].items())
    return (
        f"  {name:<12} {load:>5} offered {run['offered_per_s']:>5}/s"
        f"  goodput {run['goodput_per_s']:>4}/s  200s p50 {run['p50_200_ms']} ms"
        f" p99 {run['p99_200_ms']} ms  503s p99 {run['p99_503_ms']} ms"
        f"  slowest connect {run['slowest_connect']}  CPU {run['cpu_us_per_answer']} us/answer"
        f"  answers {answers}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql", "both"], default="both")
    parser.add_argument("--seconds", type=float, default=10)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--max-wait", type=float, default=0.5, help="KUITTI_MAX_QUEUE_SECONDS")
    parser.add_argument(
        "--design",
        action="append",
        default=[],
        help="another server beside the two: NAME:KUITTI_X=1,KUITTI_Y=2 (repeatable)",
    )
    parser.add_argument(
        "--refusals",
        action="store_true",
        help="measure only the CPU of a refusal, each bounded design with one request held",
    )
    parser.add_argument(
        "--closed",
        type=int,
        default=0,
        metavar="CLIENTS",
        help="measure only how many requests of that many closed-loop keep-alive clients are shed",
    )
    options = parser.parse_args()
    if H2LOAD is None:
        raise SystemExit("h2load is missing: apt-get install nghttp2-client")
    kinds = ["sqlite", "postgresql"] if options.database == "both" else [options.database]
    print(f"load average before: {os.getloadavg()[0]:.1f}", flush=True)
    for kind in kinds:
        report = bench(kind, options)
        if options.refusals:
            for run in report["refusals"]:
                print(line(run["design"], "held", run), flush=True)
            continue
        if options.closed:
            print("\n".join(report["closed"]), flush=True)
            continue
        print("\n".join(report["probes"]))
        print(f"{kind}: capacity {report['capacity_per_s']}/s", flush=True)
        for number, turn in enumerate(report["rounds"], 1):
            print(f" round {number}")
            for name, loads in turn.items():
                for load, run in loads.items():
                    print(line(name, load, run), flush=True)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
