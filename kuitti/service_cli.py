"""``kuitti serve``, ``kuitti worker`` and ``kuitti demo``: running and preparing the service
(``kuitti db upgrade`` is ``kuitti.db_cli``).

``serve``, ``worker`` and ``demo`` are plain functions: ``kuitti/cli.py`` makes them commands.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn

from kuitti.asgi import LISTEN_ENV, PROCESSES_ENV, READY_CLAIM_ENV, RUN_WORKER_ENV
from kuitti.cli_helpers import fail, open_services
from kuitti.demo import fill_demo
from kuitti.logs import UVICORN_LOG_CONFIG
from kuitti.protocols import HTTP_PROTOCOL
from kuitti.worker import run_worker_process

# How long uvicorn's supervisor waits for a server process to start and to answer its health
# check. uvicorn's default (5 s) is shorter than a busy host takes to import the application: the
# supervisor then kills and respawns every process for ever and the server never listens.
WORKER_HEALTHCHECK_TIMEOUT_SECONDS = 60


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Server processes.")] = 1,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Do not run the delivery worker in-process.")
    ] = False,
) -> None:
    """Run the service (and, unless --no-worker, the delivery worker in-process)."""
    open_services()  # validates settings and migrates an embedded database before forking
    os.environ[RUN_WORKER_ENV] = "0" if no_worker else "1"
    options: dict[str, Any] = {
        "factory": True,
        "host": host,
        "port": port,
        "workers": workers,
        "timeout_worker_healthcheck": WORKER_HEALTHCHECK_TIMEOUT_SECONDS,
        "log_level": "warning",
        "log_config": UVICORN_LOG_CONFIG,
        "access_log": False,
        "proxy_headers": False,  # the app believes forwarded headers itself (kuitti/clients.py)
        "server_header": False,
        "http": HTTP_PROTOCOL,
    }
    os.environ[LISTEN_ENV] = f"http://{host}:{port}"
    os.environ[PROCESSES_ENV] = str(workers)
    if workers > 1:  # uvicorn's supervisor binds the socket and starts the processes
        with tempfile.TemporaryDirectory(prefix="kuitti-serve-") as claims:
            os.environ[READY_CLAIM_ENV] = str(Path(claims) / "ready-line")
            uvicorn.run("kuitti.asgi:app_from_environment", **options)
        return
    config = uvicorn.Config("kuitti.asgi:app_from_environment", **options)
    try:
        # Bound before the application starts, so its ready line is only logged once the
        # address is really listening (and a port in use stops here with one line).
        sock = config.bind_socket()
    except SystemExit:
        fail(f"cannot listen on {host}:{port} (is another server running there?)")
    uvicorn.Server(config).run(sockets=[sock])


def worker() -> None:
    """Run the delivery worker alone (webhooks and e-mail)."""
    services = open_services()
    try:
        run_worker_process(services)
    finally:
        services.db.dispose()  # the last connection to close on SQLite removes the WAL


def demo() -> None:
    """Add a realistic example (merchant, app, user, receipts) and print how to try it."""
    typer.echo(fill_demo(open_services()))
