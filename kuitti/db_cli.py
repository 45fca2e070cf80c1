"""``kuitti db upgrade``: apply the migrations; ``kuitti db partitions``: PostgreSQL's monthly
partitions (``kuitti.partitions``).

A module of its own, so the command imports what migrating needs and not the application (the
web app, the worker, PDF rendering: seconds of imports that a no-op upgrade was mostly made of).
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

import typer

from kuitti.cli_helpers import JsonFlag, emit, fail, open_database, settings_or_exit
from kuitti.dbmigrate import upgrade
from kuitti.partitioning import prepare_partitioning, validate_foreign_keys
from kuitti.partitions import PARTITIONED, ensure_partitions_ahead, partition_summary

db_app = typer.Typer(help="Database schema.", no_args_is_help=True)


@db_app.command("upgrade")
def db_upgrade() -> None:
    """Apply migrations to KUITTI_DATABASE_URL."""
    db = open_database(settings_or_exit(), pool_size=1)
    try:
        upgrade(db)
    finally:
        db.dispose()
    typer.echo("database is at the newest revision")


@db_app.command("partitions")
def db_partitions(
    ahead: Annotated[
        int | None,
        typer.Option(help="Make this month's partitions and those of N months after it."),
    ] = None,
    prepare: Annotated[
        bool,
        typer.Option(
            help="Before migrations 0007, 0009 and 0012: add and validate the CHECK constraints "
            "that let them attach the existing tables without reading them, while the service "
            "runs on."
        ),
    ] = False,
    validate: Annotated[
        bool,
        typer.Option(
            help="After migrations 0007, 0009 and 0012: validate the foreign keys they left "
            "NOT VALID."
        ),
    ] = False,
    as_json: JsonFlag = False,
) -> None:
    """PostgreSQL's monthly partitions: list them (and make, prepare or validate)."""
    # Two: --prepare builds an index CONCURRENTLY on a connection of its own.
    db = open_database(settings_or_exit(), pool_size=2)
    try:
        if db.is_sqlite:
            fail("SQLite keeps plain tables: there are no partitions")
        done = []
        if prepare:
            done += prepare_partitioning(db.engine, datetime.now(UTC))
        if validate:
            done += validate_foreign_keys(db.engine)
        if ahead is not None:
            with db.engine.begin() as connection:
                done += ensure_partitions_ahead(connection, datetime.now(UTC), ahead)
        with db.engine.connect() as connection:
            listed = {table: partition_summary(connection, table) for table in PARTITIONED}
    finally:
        db.dispose()
    data = {"done": done, "partitions": listed}
    lines = [f"{line}" for line in done] + [
        f"{p['name']}  {p['from'] or 'MINVALUE'} .. {p['to'] or 'DEFAULT'}  ~{p['rows']} rows"
        + (f"  refers to {p['refers_to']}" if p["refers_to"] else "")
        for table in listed.values()
        for p in table
    ]
    emit(data, as_json, "\n".join(lines))
