"""Receipt reads in-process: the ASGI app called directly (no HTTP, no other process), so the
CPU it prints is kuitti's own, whatever the load generator or the machine's other work costs.

It posts ``--receipts`` receipts of ``bench/ingest.py`` (60 rows) through the app, then reads
``GET /api/v1/receipts/<id>/service_json/`` (the receipts in turn), the list
(``GET /api/v1/receipts/``, default page of 50) and ``/healthz`` (the framework's floor) from
``--clients`` concurrent clients, and prints the CPU per request of each.

    .venv/bin/python bench/reading_inprocess.py [--database sqlite|postgresql] [--requests 2000]
    .venv/bin/py-spy record --gil --format raw -o profile.txt -- \\
        .venv/bin/python bench/reading_inprocess.py          # where the CPU goes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import anyio.to_thread
from fastapi import FastAPI

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from bare_app import parse_only  # noqa: E402  (bench/bare_app.py)
from ingest import realistic_receipt  # noqa: E402  (bench/ingest.py)
from ingest_inprocess import Message, app_logging_to_nowhere, post, setup  # noqa: E402

from kuitti.app import tune_garbage_collector  # noqa: E402
from kuitti.config import Settings  # noqa: E402


async def get(app: object, path: str, api_key: str) -> tuple[int, bytes]:
    """One GET through the whole app; the status and the body."""
    target, _, query = path.partition("?")
    scope = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": "GET",
        "scheme": "http", "path": target, "raw_path": target.encode(),
        "query_string": query.encode(), "root_path": "", "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 80),
        "headers": [(b"host", b"bench"), (b"authorization", f"Token {api_key}".encode())],
    }  # fmt: skip
    answer: list[Message] = []
    sent = False

    async def receive() -> Message:
        nonlocal sent
        if sent:
            await asyncio.Event().wait()
        sent = True
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        answer.append(message)

    await app(scope, receive, send)  # type: ignore[operator]
    body = b"".join(m.get("body", b"") for m in answer[1:])  # type: ignore[misc]
    return int(answer[0]["status"]), body  # type: ignore[call-overload]


async def run(
    app: object, paths: Callable[[int], str], api_key: str, count: int, clients: int, threads: int
) -> None:
    # As the lifespan does in a served process (``KUITTI_THREADS``): the limiter belongs to the
    # event loop, and anyio's default of 40 threads fighting for the GIL costs double the CPU.
    anyio.to_thread.current_default_thread_limiter().total_tokens = threads
    numbers = iter(range(count))

    async def client() -> None:
        for number in numbers:
            status, _body = await get(app, paths(number), api_key)
            assert status == 200, status

    # The lifespan's other part that reads depend on: PostgreSQL's pool on this event loop.
    db = app.state.services.db if isinstance(app, FastAPI) else None
    if db is not None:
        await db.open_async_reads()
    try:
        await asyncio.gather(*(client() for _ in range(clients)))
    finally:
        if db is not None:
            await db.close_async_reads()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--receipts", type=int, default=100, help="receipts stored and read")
    parser.add_argument("--requests", type=int, default=2000, help="requests per route")
    parser.add_argument(
        "--log-level", default="INFO", help="INFO, as served: each request writes its access line"
    )
    parser.add_argument("--clients", type=int, default=10)
    parser.add_argument(
        "--threads", type=int, default=Settings().threads, help="KUITTI_THREADS, as served"
    )
    args = parser.parse_args()
    rng = random.Random(20260115)
    with tempfile.TemporaryDirectory() as tmp, setup(args.database, Path(tmp)) as api_key:
        os.environ["KUITTI_LOG_LEVEL"] = args.log_level
        app = app_logging_to_nowhere()
        tune_garbage_collector()  # as the lifespan does in a served process
        ids: list[str] = []

        async def store() -> None:
            for number in range(args.receipts):
                body = json.dumps(realistic_receipt(rng, number, 60)).encode()
                assert await post(app, body, api_key) == 200
            _status, listed = await get(app, f"/api/v1/receipts/?limit={args.receipts}", api_key)
            ids.extend(item["receipt_id"] for item in json.loads(listed)["receipts"])

        asyncio.run(store())
        routes: dict[str, Callable[[int], str]] = {
            "healthz": lambda i: "/healthz",
            "service_json": lambda i: f"/api/v1/receipts/{ids[i % len(ids)]}/service_json/",
            "list (page of 50)": lambda i: "/api/v1/receipts/",
        }
        print(
            f"{args.database}: {args.receipts} receipts, {args.requests} requests per route, "
            f"{args.clients} clients, {args.threads} threads; load average {os.getloadavg()[0]:.2f}"
        )
        # The floor's reference in the same run: Starlette's /healthz (bench/bare_app.py).
        apps = {"healthz (Starlette)": parse_only, **dict.fromkeys(routes, app)}
        paths_of = {"healthz (Starlette)": routes["healthz"], **routes}
        floor = 0.0
        for name, paths in paths_of.items():
            asyncio.run(run(apps[name], paths, api_key, 200, args.clients, args.threads))  # warm-up
            started, cpu = time.perf_counter(), time.process_time()
            asyncio.run(run(apps[name], paths, api_key, args.requests, args.clients, args.threads))
            wall = time.perf_counter() - started
            per_request = 1000 * (time.process_time() - cpu) / args.requests
            floor = floor or per_request
            print(
                f"  {name:<20} CPU per request {per_request:.3f} ms "
                f"({per_request / floor:.1f} x Starlette's /healthz), "
                f"{args.requests / wall:.0f}/s in one process"
            )
    print(f"load average {os.getloadavg()[0]:.2f} at the end")


if __name__ == "__main__":
    main()
