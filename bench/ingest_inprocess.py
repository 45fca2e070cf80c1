"""Receipt posts in-process: the ASGI app called directly (no HTTP, no other process), so the
CPU it prints is kuitti's own, and a profiler sees only kuitti.

It posts the receipts of ``bench/ingest.py`` (60 rows, a CARD payment) from N concurrent
clients, as uvicorn would hand them to one process, and prints the CPU per stored receipt
beside the CPU of validation alone on the same bodies in the same process (the part of a post
that ``parse_receipt_request`` owns; the rest is the framework, authentication and the write).

    .venv/bin/python bench/ingest_inprocess.py [--database sqlite|postgresql] [--receipts 2000]
    .venv/bin/python bench/ingest_inprocess.py --signing-turns 8    # what signing costs a post
    .venv/bin/py-spy record --gil --format raw -o profile.txt -- \\
        .venv/bin/python bench/ingest_inprocess.py          # where the CPU goes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bare_app import parse_only  # noqa: E402  (bench/bare_app.py)
from ingest import BIN, database, realistic_receipt  # noqa: E402  (bench/ingest.py)
from what_if import no_signature  # noqa: E402  (bench/what_if.py)

from kuitti import signatures  # noqa: E402
from kuitti.app import create_app, tune_garbage_collector  # noqa: E402
from kuitti.receipts.validation import parse_receipt_request  # noqa: E402

Message = dict[str, object]


@contextmanager
def setup(kind: str, workdir: Path) -> Iterator[str]:
    """Environment for a fresh database with one merchant; yields the API key."""
    with database(kind) as url:
        os.environ["KUITTI_VAR_DIR"] = str(workdir / "var")
        os.environ["KUITTI_LOG_LEVEL"] = "WARNING"
        os.environ.pop("KUITTI_DATABASE_URL", None)
        if url:
            os.environ["KUITTI_DATABASE_URL"] = url
            subprocess.run([str(BIN / "kuitti"), "db", "upgrade"], check=True, capture_output=True)
        created = subprocess.run(
            [str(BIN / "kuitti"), "partner", "create", "--name", "Bench", "--role", "merchant",
             "--json"],
            check=True, capture_output=True,
        )  # fmt: skip
        yield json.loads(created.stdout)["api_key"]


def app_logging_to_nowhere() -> object:
    """The app from the environment, its log lines written (as served) but to /dev/null, while
    this script's own errors still reach the terminal."""
    terminal = sys.stderr
    sys.stderr = Path(os.devnull).open("w")  # noqa: SIM115  (open while the process logs)
    try:
        return create_app()
    finally:
        sys.stderr = terminal


async def post(app: object, body: bytes, api_key: str) -> int:
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "POST",
        "scheme": "http", "path": "/api/v1/receipts/", "raw_path": b"/api/v1/receipts/",
        "query_string": b"", "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "headers": [
            (b"host", b"bench"), (b"content-type", b"application/json"),
            (b"authorization", f"Token {api_key}".encode()),
            (b"content-length", str(len(body)).encode()),
        ],
    }  # fmt: skip
    sent = False
    statuses: list[int] = []

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    async def send(message: Message) -> None:
        if message["type"] == "http.response.start":
            statuses.append(int(message["status"]))  # type: ignore[call-overload]

    await app(scope, receive, send)  # type: ignore[operator]
    return statuses[0]


async def run(app: object, bodies: list[bytes], api_key: str, count: int, clients: int) -> None:
    numbers = iter(range(count))

    async def client() -> None:
        for number in numbers:
            status = await post(app, bodies[number % len(bodies)], api_key)
            assert status == 200, status

    await asyncio.gather(*(client() for _ in range(clients)))


def cpu_per_post(app: object, bodies: list[bytes], api_key: str, count: int, clients: int) -> float:
    """CPU (ms) of this process per post, over ``count`` posts."""
    cpu = time.process_time()
    asyncio.run(run(app, bodies, api_key, count, clients))
    return 1000 * (time.process_time() - cpu) / count


def signing_in_turns(
    app: object, bodies: list[bytes], api_key: str, args: argparse.Namespace
) -> None:
    """Rounds with signing and without it in turns, so that the machine's pace moves both
    alike; the best and the median round of each, and the difference of the medians."""
    signing = signatures.sign
    rounds: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(args.signing_turns):
        for signed in (True, False):
            signatures.sign = signing if signed else no_signature
            rounds[signed].append(cpu_per_post(app, bodies, api_key, args.receipts, args.clients))
    signatures.sign = signing
    medians = {signed: statistics.median(cpu) for signed, cpu in rounds.items()}
    for signed, cpu in rounds.items():
        print(
            f"{args.database}, {'signing' if signed else 'no signing'}: CPU per receipt "
            f"{min(cpu):.3f}–{max(cpu):.3f} ms, median {medians[signed]:.3f} ms"
        )
    print(
        f"signing costs a post {1000 * (medians[True] - medians[False]):.0f} µs of CPU "
        f"(medians of {args.signing_turns} rounds of {args.receipts}); load average "
        f"{os.getloadavg()[0]:.2f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--receipts", type=int, default=2000)
    parser.add_argument(
        "--log-level", default="INFO", help="INFO, as served: each request writes its access line"
    )
    parser.add_argument("--clients", type=int, default=50)
    parser.add_argument(
        "--signing-turns",
        type=int,
        default=0,
        metavar="N",
        help="instead: N rounds of --receipts posts each with signing and without it (a "
        "constant signature, bench/what_if.py), in turns, and what signing costs a post",
    )
    args = parser.parse_args()
    rng = random.Random(20260115)
    bodies = [json.dumps(realistic_receipt(rng, i, 60)).encode() for i in range(200)]
    with tempfile.TemporaryDirectory() as tmp, setup(args.database, Path(tmp)) as api_key:
        os.environ["KUITTI_LOG_LEVEL"] = args.log_level
        app = app_logging_to_nowhere()
        tune_garbage_collector()  # as the lifespan does in a served process
        asyncio.run(run(app, bodies, api_key, 200, args.clients))  # warm-up
        if args.signing_turns:
            signing_in_turns(app, bodies, api_key, args)
            return
        started, cpu = time.perf_counter(), time.process_time()
        asyncio.run(run(app, bodies, api_key, args.receipts, args.clients))
        wall = time.perf_counter() - started
        per_post = 1000 * (time.process_time() - cpu) / args.receipts
        cpu = time.process_time()
        for number in range(args.receipts):
            parse_receipt_request(bodies[number % len(bodies)], attachments_enabled=False)
        per_validation = 1000 * (time.process_time() - cpu) / args.receipts
        asyncio.run(run(parse_only, bodies, api_key, 200, args.clients))  # warm-up
        cpu = time.process_time()
        asyncio.run(run(parse_only, bodies, api_key, args.receipts, args.clients))
        per_parse = 1000 * (time.process_time() - cpu) / args.receipts
    print(
        f"{args.database}: {args.receipts} receipts, {args.clients} clients, "
        f"{args.receipts / wall:.0f}/s in one process; CPU per receipt {per_post:.2f} ms, "
        f"of which validation alone {per_validation:.2f} ms, "
        f"the rest {per_post - per_validation:.2f} ms; the parse-only reference (Starlette, "
        f"bench/bare_app.py) {per_parse:.3f} ms per post; load average {os.getloadavg()[0]:.2f}"
    )


if __name__ == "__main__":
    main()
