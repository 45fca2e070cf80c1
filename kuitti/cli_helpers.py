"""What every ``kuitti`` command shares: settings, services, output and failure.

The domain command groups (``kuitti/cards/cli.py``, ``oauth/cli.py``, ``webhooks/cli.py``,
``partners/cli.py``, ``users/cli.py``) import this module; none of them imports the root
``kuitti/cli.py``, which only lists them.
"""

from __future__ import annotations

import sys
import weakref
from typing import Annotated, Any, NoReturn

import orjson
import typer
from pydantic import ValidationError
from sqlalchemy.exc import ArgumentError, OperationalError

from kuitti.clock import SystemClock
from kuitti.config import Settings, load_settings
from kuitti.db import Database
from kuitti.dbmigrate import schema_is_current, upgrade
from kuitti.logs import configure_logging, log
from kuitti.services import Services

JsonFlag = Annotated[bool, typer.Option("--json", help="Print one JSON object.")]


def fail(message: str) -> NoReturn:
    """One red line on stderr and exit status 2: what an operator sees for any mistake."""
    typer.secho(f"error: {message}", err=True, fg=typer.colors.RED)
    raise typer.Exit(2)


def emit(data: dict[str, Any], as_json: bool, human: str) -> None:
    if as_json:
        sys.stdout.write(orjson.dumps(data).decode() + "\n")
    else:
        typer.echo(human)


def settings_or_exit() -> Settings:
    try:
        return load_settings()
    except ValidationError as exc:
        lines = [
            f"KUITTI_{'_'.join(str(p) for p in e['loc']).upper()}: "
            + e["msg"].removeprefix("Value error, ")
            for e in exc.errors()
        ]
        fail("invalid settings: " + "; ".join(lines))


def open_database(settings: Settings, pool_size: int) -> Database:
    """The configured database, or exit with one line when it cannot be reached."""
    try:
        db = Database(
            settings.resolved_database_url,
            pool_size=pool_size,
            listen_url=settings.listen_database_url,
            prepared_statements=settings.db_prepared_statements,
        )
    except ArgumentError as exc:
        fail(f"KUITTI_DATABASE_URL: {exc}")
    try:
        with db.engine.connect():
            pass
    except OperationalError as exc:
        db.dispose()
        reason = str(exc.orig or exc).strip().splitlines()[0]
        fail(f"cannot connect to the database {db.label}: {reason}")
    return db


def notice(message: str, *, logged: bool, warning: bool = True) -> None:
    """A line for the operator on stderr: plain (``kuitti: …``), or a log line where the
    command's stderr is its log (``serve``, ``worker``)."""
    if not logged:
        typer.echo(f"kuitti: {message}", err=True)
    elif warning:
        log.warning(message)
    else:
        log.info(message)


def say_which_database(settings: Settings, *, logged: bool = False) -> None:
    """The database when it is the default one (an operator who named one knows it), and a
    warning before a new SQLite file is made."""
    path = settings.sqlite_path
    if path is not None and not path.exists():
        notice(
            f"no database at {path}: creating a new one (KUITTI_VAR_DIR or KUITTI_DATABASE_URL "
            "names another)",
            logged=logged,
        )
    elif not settings.database_url:
        notice(f"database {path}", logged=logged, warning=False)


def make_secret_if_missing(settings: Settings, *, logged: bool = False) -> None:
    """Without ``KUITTI_SECRET_KEY``, make ``var/secret_key`` now and say so: a process with
    another secret cannot open what this one seals."""
    if settings.secret_key or (settings.var_dir / "secret_key").exists():
        return
    _ = settings.resolved_secret_key
    notice(
        f"generated a new server secret in {settings.var_dir / 'secret_key'} (every process "
        "that shares this database needs the same one: KUITTI_SECRET_KEY)",
        logged=logged,
    )


def open_services(*, logged: bool = False) -> Services:
    """Settings, database and clock for one command; an embedded SQLite is migrated on the spot.
    The database connections are closed when the command ends. ``logged``: the command's
    stderr is its log, configured now, and the notices are log lines."""
    settings = settings_or_exit()
    if logged:
        configure_logging(settings.log_level, json=settings.log_json)
    say_which_database(settings, logged=logged)
    db = open_database(settings, pool_size=2)
    make_secret_if_missing(settings, logged=logged)
    if db.is_sqlite:
        upgrade(db)
    elif not schema_is_current(db):
        db.dispose()
        fail("the database schema is not current: run 'kuitti db upgrade'")
    services = Services(settings=settings, db=db, clock=SystemClock())
    weakref.finalize(services, db.dispose)
    return services
