"""``kuitti serve``, ``kuitti worker`` and ``kuitti demo``: running and preparing the service
(``kuitti db upgrade`` is ``kuitti.db_cli``).

``serve``, ``worker`` and ``demo`` are plain functions: ``kuitti/cli.py`` makes them commands.
"""

from __future__ import annotations

import os
import socket
import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
import uvicorn
from sqlalchemy import select
from uvicorn.supervisors import Multiprocess

from kuitti.asgi import LISTEN_ENV, PROCESSES_ENV, READY_CLAIM_ENV, RUN_WORKER_ENV
from kuitti.cli_helpers import fail, open_services
from kuitti.config import Settings
from kuitti.db import Database
from kuitti.demo import fill_demo
from kuitti.logs import UVICORN_LOG_CONFIG
from kuitti.models import Partner, ReceiptSigningKey, SigningKey
from kuitti.protocols import HTTP_PROTOCOL
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.worker import run_worker_process
from kuitti.worker_http import bind_monitoring

# How long uvicorn's supervisor waits for a server process to start and to answer its health
# check. uvicorn's default (5 s) is shorter than a busy host takes to import the application: the
# supervisor then kills and respawns every process for ever and the server never listens.
WORKER_HEALTHCHECK_TIMEOUT_SECONDS = 60
PUBLIC_URL_ENV = "KUITTI_PUBLIC_URL"


def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[
        int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")
    ] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Server processes.")] = 1,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Do not run the delivery worker in-process.")
    ] = False,
) -> None:
    """Run the service (and, unless --no-worker, the delivery worker in-process)."""
    opened_for_service()  # validates settings, migrates an embedded database, then forks
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
    config = uvicorn.Config("kuitti.asgi:app_from_environment", **options)
    try:
        # Bound before the application starts, so its ready line names the real port (with
        # --port 0 too) and is only logged once the address is really listening; a port in use
        # stops here with one line.
        sock = config.bind_socket()
    except SystemExit:
        fail(f"cannot listen on {host}:{port} (is another server running there?)")
    bound_port = sock.getsockname()[1]
    os.environ[LISTEN_ENV] = http_address(host, bound_port)
    # Links and addresses follow the port served on unless the operator named the public URL.
    os.environ.setdefault(PUBLIC_URL_ENV, http_address(public_host(host), bound_port))
    os.environ[PROCESSES_ENV] = str(workers)
    if workers == 1:
        uvicorn.Server(config).run(sockets=[sock])
        return
    with tempfile.TemporaryDirectory(prefix="kuitti-serve-") as claims:
        os.environ[READY_CLAIM_ENV] = str(Path(claims) / "ready-line")
        Multiprocess(config, sockets=[sock]).run()  # uvicorn's supervisor starts the processes


def opened_for_service() -> Services:
    """``open_services`` for a process that serves: the stored keys checked as well."""
    services = open_services(logged=True)
    check_secret_opens_sealed_keys(services.db, services.settings)
    return services


SEALED_COLUMNS = (
    ReceiptSigningKey.private_jwk_sealed,
    SigningKey.private_jwk_sealed,
    Partner.webhook_key_sealed,
)


def check_secret_opens_sealed_keys(db: Database, settings: Settings) -> None:
    """Stop unless the server secret opens the keys the database keeps sealed with it (one of
    each kind). A process started with another secret (a lost ``var/secret_key``, an instance
    configured apart) would otherwise start, then fail every receipt post, token and webhook."""
    box = SecretBox(settings.resolved_secret_key)
    with db.session(write=False) as session:
        sealed = [
            session.scalar(select(column).where(column.is_not(None)).limit(1))
            for column in SEALED_COLUMNS
        ]
    for value in sealed:
        if value is None:
            continue
        try:
            box.open(value)
        except ValueError:
            db.dispose()
            fail(
                "the server secret (KUITTI_SECRET_KEY, or var/secret_key) does not open the"
                " keys stored in this database: every instance must run with the secret"
                " they were sealed with"
            )


def http_address(host: str, port: int) -> str:
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def public_host(host: str) -> str:
    """The host name clients use for ``host``: the machine's name for a wildcard address."""
    return socket.gethostname() if host in {"0.0.0.0", "::", ""} else host  # noqa: S104


def worker(
    host: Annotated[
        str, typer.Option(help="Address for /healthz and /metrics.", envvar="KUITTI_WORKER_HOST")
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            min=0,
            max=65535,
            help="Port for /healthz and /metrics (0: any free port).",
            envvar="KUITTI_WORKER_PORT",
        ),
    ] = 8001,
) -> None:
    """Run the delivery worker alone (webhooks and e-mail)."""
    services = opened_for_service()
    try:
        try:
            monitoring = bind_monitoring(host, port)
        except OSError as exc:
            fail(f"cannot listen on {host}:{port} ({exc.strerror}; is another worker there?)")
        address = http_address(host, monitoring.getsockname()[1])
        run_worker_process(services, monitoring=monitoring, listening=address)
    finally:
        services.db.dispose()  # the last connection to close on SQLite removes the WAL


def demo() -> None:
    """Add a realistic example (merchant, app, user, receipts) and print how to try it."""
    typer.echo(fill_demo(open_services()))
