"""Alembic environment: the one metadata of ``kuitti.models``; batch mode for SQLite."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine

import kuitti.models  # noqa: F401  (registers every table)
from kuitti.db import Base
from kuitti.partitions import compared

config = context.config
target_metadata = Base.metadata


def run_migrations_online() -> None:
    connection = config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = create_engine(config.get_main_option("sqlalchemy.url") or "")
    with engine.begin() as conn:
        _run(conn)


def _run(connection: object) -> None:
    context.configure(
        connection=connection,  # type: ignore[arg-type]
        target_metadata=target_metadata,
        render_as_batch=True,
        compare_type=True,
        include_object=compared,
        # A revision may step out of its transaction (``op.get_context().autocommit_block()``).
        transaction_per_migration=True,
    )
    with context.begin_transaction():
        context.run_migrations()


if context.is_offline_mode():
    raise SystemExit("offline migrations are not supported; run 'kuitti db upgrade'")
run_migrations_online()
