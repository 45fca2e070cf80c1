"""Alembic, driven from code: the migration itself, loaded by ``kuitti.dbmigrate`` only when a
database is behind (Alembic and its script directory take a tenth of a second to import)."""

from __future__ import annotations

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory

from kuitti.db import Database
from kuitti.dbmigrate import MIGRATIONS_DIR


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def script_head() -> str | None:
    """The head of ``migrations/versions`` as Alembic reads it (``dbmigrate.HEAD_REVISION``
    must name it: tests/test_migrations.py)."""
    return ScriptDirectory.from_config(alembic_config("sqlite://")).get_current_head()


def upgrade_to_head(db: Database) -> None:
    """Each revision in a transaction of its own (``migrations/env.py``), which a revision may
    leave for statements that cannot run in one (``CREATE INDEX CONCURRENTLY``, 0010)."""
    config = alembic_config(db.url)
    with db.engine.connect() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, "head")
