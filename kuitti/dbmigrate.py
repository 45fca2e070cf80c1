"""Alembic, driven from code: ``kuitti db upgrade``, start-up migration of SQLite, readiness."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory

from kuitti.db import Database

MIGRATIONS_DIR = Path(__file__).resolve().parent.parent / "migrations"


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


# Rows sampled per index by SQLite's ANALYZE: statistics good enough to plan by, without
# reading the whole of a large table (some milliseconds at millions of receipts).
ANALYSIS_LIMIT = 1000


def upgrade(db: Database) -> None:
    """Migrate to the newest revision, then refresh SQLite's statistics. A database already
    there is only checked: Alembic's environment (which imports every model) is not loaded."""
    if not schema_is_current(db):
        config = alembic_config(db.url)
        with db.engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
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


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def schema_is_current(db: Database) -> bool:
    with db.engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
    return current == head_revision()


def not_ready_reason(db: Database) -> str | None:
    """Why the database cannot serve requests now, or None: its schema is not current, or
    (PostgreSQL) it takes no writes (a standby, ``default_transaction_read_only``). A database
    that cannot be reached raises."""
    with db.engine.connect() as connection:
        current = MigrationContext.configure(connection).get_current_revision()
        read_only = (
            db.dialect == "postgresql"
            and connection.exec_driver_sql("SHOW transaction_read_only").scalar() == "on"
        )
    if read_only:
        return "the database is read-only: a standby, or default_transaction_read_only"
    if current != head_revision():
        return "run 'kuitti db upgrade'"
    return None
