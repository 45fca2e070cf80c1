"""The ``kuitti`` operator command line (SPEC §3).

Every command that creates something takes ``--json`` and then prints exactly one JSON object.
Secrets are printed once, at creation.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import weakref
from typing import Annotated, Any, NoReturn

import orjson
import typer
import uvloop
from pydantic import ValidationError

from kuitti.clock import SystemClock
from kuitti.config import Settings, load_settings
from kuitti.db import Database
from kuitti.dbmigrate import schema_is_current, upgrade
from kuitti.services import Services

app = typer.Typer(
    help="kuitti, an open digital receipt service.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
)
db_app = typer.Typer(help="Database schema.", no_args_is_help=True)
user_app = typer.Typer(help="Service users.", no_args_is_help=True)
app.add_typer(db_app, name="db")
app.add_typer(user_app, name="user")

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def fail(message: str) -> NoReturn:
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except ValidationError as exc:
        lines = [
            f"  KUITTI_{'_'.join(str(p) for p in e['loc']).upper()}: {e['msg']}"
            for e in exc.errors()
        ]
        fail("invalid settings:\n" + "\n".join(lines))


def open_services() -> Services:
    """Settings, database and clock for one command; an embedded SQLite is migrated on the spot.
    The database connections are closed when the command ends."""
    settings = settings_or_exit()
    db = Database(settings.resolved_database_url, pool_size=2)
    if db.is_sqlite:
        upgrade(db)
    elif not schema_is_current(db):
        db.dispose()
        fail("the database schema is not current: run 'kuitti db upgrade'")
    services = Services(settings=settings, db=db, clock=SystemClock())
    weakref.finalize(services, db.dispose)
    return services


def emit(data: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(data).decode() + "\n")
    else:
        typer.echo(human)


@app.command()
def serve(
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8000,
    workers: Annotated[int, typer.Option(min=1, help="Server processes.")] = 1,
    no_worker: Annotated[
        bool, typer.Option("--no-worker", help="Do not run the delivery worker in-process.")
    ] = False,
) -> None:
    """Run the service (and, unless --no-worker, the delivery worker in-process)."""
    import uvicorn

    from kuitti.asgi import RUN_WORKER_ENV
    from kuitti.logs import UVICORN_LOG_CONFIG

    open_services()  # validates settings and migrates an embedded database before forking
    os.environ[RUN_WORKER_ENV] = "0" if no_worker else "1"
    uvicorn.run(
        "kuitti.asgi:app_from_environment",
        factory=True,
        host=host,
        port=port,
        workers=workers,
        log_level="warning",
        log_config=UVICORN_LOG_CONFIG,
        access_log=False,
        proxy_headers=True,
        server_header=False,
    )


@app.command()
def worker() -> None:
    """Run the delivery worker alone (webhooks and e-mail)."""
    from kuitti.worker import run_worker

    async def main(services: Services) -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await run_worker(services, stop)

    # uvloop (installed with uvicorn[standard]) as kuitti serve uses: less CPU per delivery.
    uvloop.run(main(open_services()))


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply migrations to KUITTI_DATABASE_URL."""
    settings = settings_or_exit()
    db = Database(settings.resolved_database_url, pool_size=1)
    try:
        upgrade(db)
    finally:
        db.dispose()
    typer.echo("database is at the newest revision")


@user_app.command("create")
def user_create(
    email: Annotated[str, typer.Option(help="E-mail address (login).")],
    password: Annotated[str, typer.Option(help="Password (at least 8 characters).")],
    as_json: JsonFlag = False,
) -> None:
    """Create a verified service user."""
    from kuitti.users import service as users

    try:
        services = open_services()
        with services.db.session() as session:
            user = users.create_user(
                session, email, password, now=services.clock.now(), verified=True
            )
            data = {"user_id": str(user.id), "email": user.email}
    except users.UserInputError as exc:
        fail(str(exc))
    emit(data, as_json, f"user {data['email']} created ({data['user_id']})")


@app.command()
def demo() -> None:
    """Fill an empty database with a realistic example and print how to try it."""
    from kuitti.demo import fill_demo

    try:
        typer.echo(fill_demo(open_services()))
    except ValueError as exc:
        fail(str(exc))


def _register_domain_commands() -> None:
    from kuitti.cards.cli import card_app, receipts_app
    from kuitti.oauth.cli import keys_app
    from kuitti.partners.cli import partner_app
    from kuitti.webhooks.cli import webhooks_app

    app.add_typer(partner_app, name="partner")
    app.add_typer(card_app, name="card")
    app.add_typer(webhooks_app, name="webhooks")
    app.add_typer(keys_app, name="keys")
    app.add_typer(receipts_app, name="receipts")


_register_domain_commands()
