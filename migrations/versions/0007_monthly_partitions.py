"""monthly partitions of the tables that grow with receipts (PostgreSQL); partner retention

PostgreSQL: ``receipts``, ``receipt_grants`` and ``receipt_deliveries`` become tables
partitioned by range of a UUIDv7 key, one partition a month (``kuitti.partitions``). Nothing is
copied: each existing table is renamed to ``<table>_legacy`` and attached as the partition of
every row made before the first month boundary after now (``<table>_legacy`` holds them until
retention empties it). A ``CHECK`` constraint on that bound lets the attach skip its scan: made
and validated here unless ``kuitti db partitions --prepare`` made it beforehand, while the
service ran on. Then come the partitions of this month and the next three, and a default
partition per table. Foreign keys from unpartitioned tables are re-pointed at the new parents
``NOT VALID`` (they hold for every new row at once; ``kuitti db partitions --validate``
validates the old rows later without blocking writes); those of the partitioned tables are
checked when their table is attached (PostgreSQL 15 cannot defer them). The measured lock times
are in docs/operations.md, "Partitions".

Both databases: ``partners.retention_days``, a partner's own receipt retention.

Downgrade (PostgreSQL): refused while any month's partition holds rows; the migration is meant
to be one-way on a database in service (docs/operations.md).

Revision ID: 0007
Revises: 0006
Create Date: 2026-11-29 05:30:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

import sqlalchemy as sa
from alembic import op

from kuitti.partitions import (
    PARTITIONED,
    add_months,
    ensure_month_partitions,
    first_partitioned_month,
    legacy_check,
    month_floor,
)

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONTHS_AHEAD = 3


def upgrade() -> None:
    op.add_column("partners", sa.Column("retention_days", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    bind = op.get_bind()
    now = datetime.now(UTC)  # ids carry the system clock's time (kuitti.ids)
    first = first_partitioned_month(now)
    bound = month_floor(first)
    referencing = _referencing_foreign_keys(bind)
    for constraint, table, _definition in referencing:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
    for table, key in reversed(PARTITIONED.items()):  # receipts first: the others refer to it
        _partition(bind, table, key, bound)
    for constraint, table, definition in referencing:
        # PostgreSQL 15 checks a partitioned table's foreign key when it is made.
        deferred = "" if table in PARTITIONED else " NOT VALID"
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {constraint} {definition}{deferred}")
    for count in range(MONTHS_AHEAD + 1):
        ensure_month_partitions(bind, add_months(first, count))


def _referencing_foreign_keys(bind: sa.Connection) -> list[tuple[str, str, str]]:
    """Every foreign key that references a table about to be partitioned: name, table, DDL."""
    rows = bind.execute(
        sa.text(
            "SELECT conname, conrelid::regclass::text, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE contype = 'f'"
            " AND confrelid::regclass::text = ANY(:tables)"
        ),
        {"tables": list(PARTITIONED)},
    )
    return [(name, table, definition) for name, table, definition in rows]


def _partition(bind: sa.Connection, table: str, key: str, bound: object) -> None:
    legacy = f"{table}_legacy"
    check = legacy_check(table)
    has_check = bind.execute(
        sa.text(
            "SELECT convalidated FROM pg_constraint"
            " WHERE conname = :name AND conrelid = to_regclass(:table)"
        ),
        {"name": check, "table": table},
    ).scalar()
    if has_check is None:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({key} < '{bound}') NOT VALID")
    if not has_check:
        op.execute(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}")
    indexes = list(
        bind.execute(
            sa.text(
                "SELECT i.relname, pg_get_indexdef(i.oid), c.conname FROM pg_index x"
                " JOIN pg_class i ON i.oid = x.indexrelid"
                " LEFT JOIN pg_constraint c ON c.conindid = i.oid AND c.contype = 'p'"
                " WHERE x.indrelid = to_regclass(:table)"
            ),
            {"table": table},
        )
    )
    own_keys = list(
        bind.execute(
            sa.text(
                "SELECT conname, pg_get_constraintdef(oid), confrelid::regclass::text"
                " FROM pg_constraint WHERE contype IN ('f', 'c')"
                " AND conrelid = to_regclass(:table) AND conname <> :check"
            ),
            {"table": table, "check": check},
        )
    )
    op.execute(f"ALTER TABLE {table} RENAME TO {legacy}")
    for name, _definition, primary in indexes:
        if primary:
            op.execute(f"ALTER TABLE {legacy} RENAME CONSTRAINT {primary} TO {primary}_legacy")
        else:
            op.execute(f"ALTER INDEX {name} RENAME TO {name}_legacy")
    for name, definition, referenced in own_keys:
        # A key to a table that is now a partition must point at its new parent instead.
        if referenced in PARTITIONED:
            op.execute(f"ALTER TABLE {legacy} DROP CONSTRAINT {name}")
        else:
            op.execute(f"ALTER TABLE {legacy} RENAME CONSTRAINT {name} TO {name}_legacy")
    op.execute(
        f"CREATE TABLE {table} (LIKE {legacy} INCLUDING DEFAULTS INCLUDING GENERATED)"
        f" PARTITION BY RANGE ({key})"
    )
    for name, definition, primary in indexes:
        if primary:
            columns = definition[definition.index("(") :]
            op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {primary} PRIMARY KEY {columns}")
        else:
            op.execute(definition.replace(f" ON public.{table} ", f" ON {table} "))
    for name, definition, _referenced in own_keys:
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}")
    op.execute(f"ALTER TABLE {table} ATTACH PARTITION {legacy} FOR VALUES FROM (MINVALUE) TO ('{bound}')")
    op.execute(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        raise RuntimeError(
            "0007 is one-way on PostgreSQL: its partitions cannot be merged back in place"
        )
    with op.batch_alter_table("partners") as batch:
        batch.drop_column("retention_days")
