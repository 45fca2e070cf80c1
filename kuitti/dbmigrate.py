"""The schema's revision: ``kuitti db upgrade``, start-up migration of SQLite, readiness.

A database already at the head is only checked, against ``HEAD_REVISION``, by reading Alembic's
``alembic_version`` table: Alembic itself (``kuitti.migrate_alembic``) is imported only when there
is a migration to run, so that a command on a current database starts quickly.
"""

from __future__ import annotations

import importlib
from pathlib import Path

from sqlalchemy import Connection, inspect, text

from kuitti.db import Database

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"
# The newest revision in migrations/versions (tests/test_migrations.py fails when it is not).
HEAD_REVISION = "0012"

# Rows sampled per index by SQLite's ANALYZE: statistics good enough to plan by, without
# reading the whole of a large table (some milliseconds at millions of receipts).
ANALYSIS_LIMIT = 1000


def upgrade(db: Database) -> None:
    """Migrate to the newest revision, then refresh SQLite's statistics. A database already
    there is only checked: Alembic's environment (which imports every model) is not loaded."""
    if not schema_is_current(db):
        importlib.import_module("kuitti.migrate_alembic").upgrade_to_head(db)
    refresh_statistics(db)


def refresh_statistics(db: Database) -> None:
    """SQLite: ``ANALYZE``, each index sampled (``ANALYSIS_LIMIT``). SQLite keeps no statistics
    until it runs, and its planner then guesses how selective each index is. PostgreSQL's
    autovacuum keeps its own: nothing to do."""
    if not db.is_sqlite:
        return
    with db.engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert driver is not None
        driver.execute(f"PRAGMA analysis_limit={ANALYSIS_LIMIT}")
        driver.execute("ANALYZE")


def current_revision(connection: Connection) -> str | None:
    """The revision Alembic recorded in the database, or None (never migrated)."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    revision: str | None = connection.execute(
        text("SELECT version_num FROM alembic_version")
    ).scalar()
    return revision


def schema_is_current(db: Database) -> bool:
    with db.engine.connect() as connection:
        return current_revision(connection) == HEAD_REVISION


def not_ready_reason(db: Database) -> str | None:
    """Why the database cannot serve requests now, or None: its schema is not current, or
    (PostgreSQL) it takes no writes (a standby, ``default_transaction_read_only``). A database
    that cannot be reached raises."""
    with db.engine.connect() as connection:
        current = current_revision(connection)
        read_only = (
            db.dialect == "postgresql"
            and connection.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        )
    if read_only:
        return "the database is read-only: a standby, or default_transaction_read_only"
    if current != HEAD_REVISION:
        return "run 'kuitti db upgrade'"
    return None
