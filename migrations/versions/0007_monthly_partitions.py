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

from kuitti.partitioning import (
    first_partitioned_month,
    partition_in_place,
    referencing_foreign_keys,
)
from kuitti.partitions import ensure_month_partitions

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONTHS_AHEAD = 3
# What this revision partitions, by its key; the referred table last (``card_payments`` is 0009's).
TABLES = {"receipt_deliveries": "receipt_id", "receipt_grants": "id", "receipts": "id"}


def upgrade() -> None:
    op.add_column("partners", sa.Column("retention_days", sa.Integer(), nullable=True))
    if op.get_bind().dialect.name != "postgresql":
        return
    bind = op.get_bind()
    now = datetime.now(UTC)  # ids carry the system clock's time (kuitti.ids)
    first = first_partitioned_month(now)
    referencing = referencing_foreign_keys(bind, TABLES)
    for constraint, table, _definition in referencing:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {constraint}")
    for table, key in reversed(TABLES.items()):  # receipts first: the others refer to it
        partition_in_place(bind, table, key, first.first_id, TABLES)
    for constraint, table, definition in referencing:
        # PostgreSQL 15 checks a partitioned table's foreign key when it is made.
        deferred = "" if table in TABLES else " NOT VALID"
        op.execute(f"ALTER TABLE {table} ADD CONSTRAINT {constraint} {definition}{deferred}")
    for count in range(MONTHS_AHEAD + 1):
        ensure_month_partitions(bind, first + count)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        raise RuntimeError(
            "0007 is one-way on PostgreSQL: its partitions cannot be merged back in place"
        )
    with op.batch_alter_table("partners") as batch:
        batch.drop_column("retention_days")
