"""``kuitti db upgrade``: apply the migrations. A module of its own, so that it does not import
the application that ``kuitti serve`` runs."""

from __future__ import annotations

import typer

from kuitti.cli_helpers import open_database, settings_or_exit
from kuitti.dbmigrate import upgrade

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
