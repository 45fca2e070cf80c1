"""Read replica comparison: receipt reads with one read replica against the primary alone, in
turns in one run.

Two PostgreSQL 15 clusters of the bench's own (``tests/pgcluster.py``: ``initdb``, then
``pg_basebackup``): a primary and its synchronous streaming standby. ``--receipts`` realistic
receipts (1–60 rows, ``bench/ingest.py``) are posted by one merchant; then two kuitti servers
(``--workers`` processes each, no in-process worker) run on the same primary, one of them with
``KUITTI_READ_DATABASE_URL`` naming the standby. Every case is measured against both in turns,
``--rounds`` times, one ``--seconds`` slice of ``wrk`` with ``--clients`` connections each:

- ``read json``: ``GET /api/v1/receipts/<id>/service_json/`` of a random receipt (a process's
  rendering cache holds 512, so most reads load the receipt: on the replica, when there is one);
- ``read pdf``: the same in ``service_pdf``;
- ``list``: the merchant's first page of 50.

Printed: each case's rate and p99 on both servers, replica ÷ primary alone, and CPU per request
of kuitti's processes, of the primary and of the standby. The machine's cores are shared by
kuitti, both clusters and wrk (and whatever else runs): read the ratio from slices in turns, not
a rate.

    .venv/bin/python bench/replica.py
    .venv/bin/python bench/replica.py --receipts 5000 --rounds 3 --seconds 10 --clients 20
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import orjson

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import (  # noqa: E402  (bench/ is the script's own directory)
    LATENCY_DONE,
    WrkRun,
    free_port,
    kuitti_command,
    merged_percentile,
    realistic_receipt,
    run_wrk,
    running,
    tree_cpu_seconds,
)

from kuitti.asgi import RUN_WORKER_ENV  # noqa: E402
from tests.pgcluster import PgCluster, pg_cluster, pg_standby  # noqa: E402

CASES = ("read json", "read pdf", "list")
SECRET = "bench-replica-secret-not-for-production"


@dataclass
class Server:
    label: str
    url: str
    pid: int
    runs: dict[str, list[WrkRun]] = field(default_factory=dict)
    cpu: dict[str, list[tuple[float, float, float]]] = field(default_factory=dict)
    """Per case: CPU seconds of kuitti, the primary and the standby, per slice."""


def read_script(path: Path, api_key: str, ids: list[str], fmt: str | None) -> None:
    """A wrk script reading a random receipt of ``ids`` in ``fmt``, or the list (``None``)."""
    if fmt is None:
        request = 'local path = "/api/v1/receipts/?limit=50"'
    else:
        request = f'local path = "/api/v1/receipts/" .. ids[math.random(#ids)] .. "/{fmt}/"'
    listed = ", ".join(f'"{receipt_id}"' for receipt_id in ids)
    path.write_text(
        f"""
local ids = {{{listed}}}
math.randomseed(os.time())
request = function()
  {request}
  return wrk.format("GET", path, {{["Authorization"] = "Token {api_key}"}})
end
{LATENCY_DONE}"""
    )


def _merchant_key(env: dict[str, str], workdir: Path) -> str:
    """The schema made, and the API key of a new merchant."""
    kuitti = str(Path(sys.executable).parent / "kuitti")
    create = ["partner", "create", "--name", "Bench Market", "--role", "merchant", "--json"]
    for command in (["db", "upgrade"], create):
        done = subprocess.run(
            [kuitti, *command], env=env, cwd=workdir, capture_output=True, check=True
        )
    api_key: str = orjson.loads(done.stdout)["api_key"]
    return api_key


def post_receipts(url: str, api_key: str, count: int) -> list[str]:
    rng = random.Random(38)
    ids = []
    with httpx.Client(base_url=url, headers={"Authorization": f"Token {api_key}"}) as client:
        for number in range(count):
            answer = client.post("/api/v1/receipts/", json=realistic_receipt(rng, number, 0))
            answer.raise_for_status()
            ids.append(answer.json()["receipt_id"])
    return ids


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--receipts", type=int, default=3000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--seconds", type=int, default=8)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()

    with (
        tempfile.TemporaryDirectory() as tmp,
        ExitStack() as stack,
        pg_cluster() as primary,
        pg_standby(primary, synchronous=True) as standby,
    ):
        workdir = Path(tmp)
        base_env = {
            **os.environ,
            "PYTHONPATH": str(ROOT),
            "KUITTI_DATABASE_URL": primary.url,
            "KUITTI_SECRET_KEY": SECRET,
            "KUITTI_LOG_LEVEL": "WARNING",
            RUN_WORKER_ENV: "0",
        }
        api_key = _merchant_key({**base_env, "KUITTI_VAR_DIR": str(workdir / "var")}, workdir)

        servers = []
        for label, replica in (("primary alone", None), ("with replica", standby)):
            port = free_port()
            env = {**base_env, "KUITTI_VAR_DIR": str(workdir / f"var-{port}")}
            if replica is not None:
                env["KUITTI_READ_DATABASE_URL"] = replica.url
            command = kuitti_command(port, args.workers, "")
            url = f"http://127.0.0.1:{port}"
            log = workdir / f"{port}.log"
            pid = stack.enter_context(running(command, env, f"{url}/healthz", log))
            servers.append(Server(label, url, pid))
        ids = post_receipts(servers[0].url, api_key, args.receipts)
        primary.wait_until_applied(standby)
        print(
            f"{args.receipts:,} receipts; {args.workers} processes per server, "
            f"{args.clients} clients, {args.seconds} s slices, {args.rounds} rounds in turns",
            flush=True,
        )
        for round_number in range(args.rounds):
            for case in CASES:
                fmt = {"read json": "service_json", "read pdf": "service_pdf"}.get(case)
                for server in servers:
                    script = workdir / f"{round_number}-{case.replace(' ', '_')}.lua"
                    read_script(script, api_key, ids, fmt)
                    before = _cpu(server, primary, standby)
                    run = run_wrk(server.url, script, args.clients, args.seconds)
                    after = _cpu(server, primary, standby)
                    server.runs.setdefault(case, []).append(run)
                    used = tuple(b - a for a, b in zip(before, after, strict=True))
                    server.cpu.setdefault(case, []).append(used)  # type: ignore[arg-type]
                    print(f"  round {round_number + 1} {case:<10} {server.label:<14}"
                          f" {run.requests_per_second:>7.0f}/s  p99 {run.p99_ms:>7.1f} ms"
                          f"  non-2xx {run.non_2xx}", flush=True)  # fmt: skip
        _summary(servers, args.seconds)


def _cpu(server: Server, primary: PgCluster, standby: PgCluster) -> tuple[float, float, float]:
    clusters = [c.process.pid if c.process else 0 for c in (primary, standby)]
    return (tree_cpu_seconds(server.pid), *(tree_cpu_seconds(pid) for pid in clusters))  # type: ignore[return-value]


def _summary(servers: list[Server], seconds: int) -> None:
    alone, replicated = servers
    print(
        "\ncase        alone /s  p99 ms  replica /s  p99 ms   rate ×   p99 ×"
        "   CPU ms/request: kuitti, primary, standby (alone → with replica)"
    )
    for case in CASES:
        a, b = alone.runs[case], replicated.runs[case]
        rate_a = sum(r.requests for r in a) / (seconds * len(a))
        rate_b = sum(r.requests for r in b) / (seconds * len(b))
        p99_a, p99_b = merged_percentile(a, 99.0), merged_percentile(b, 99.0)
        errors = sum(r.non_2xx for r in a + b)
        cpu_a, cpu_b = _per_request(alone, case), _per_request(replicated, case)
        print(f"{case:<10} {rate_a:>9.0f} {p99_a:>7.1f} {rate_b:>11.0f} {p99_b:>7.1f}"
              f" {rate_b / rate_a:>8.2f} {p99_b / p99_a:>7.2f}   "
              + ", ".join(f"{x:.2f} → {y:.2f}" for x, y in zip(cpu_a, cpu_b, strict=True))
              + (f"  non-2xx {errors}" if errors else ""))  # fmt: skip


def _per_request(server: Server, case: str) -> list[float]:
    requests = sum(r.requests for r in server.runs[case])
    totals = [sum(slice_[i] for slice_ in server.cpu[case]) for i in range(3)]
    return [1000 * total / requests for total in totals]


if __name__ == "__main__":
    main()
