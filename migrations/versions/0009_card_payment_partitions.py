"""card payments partitioned by their receipt's month (PostgreSQL); nothing refers to them by a key

PostgreSQL: ``card_payments`` becomes a table partitioned by range of ``receipt_id``, with the
bounds of ``receipts``' partitions, the way 0007 partitioned the others
(``kuitti.partitioning.partition_in_place``): renamed ``card_payments_legacy`` and attached as
the partition of the rows before a bound, without copying, its ``CHECK`` made beforehand by
``kuitti db partitions --prepare`` or here. The bound is ``receipts_legacy``'s while no payment
lies beyond it (then the legacy partitions of both cover the same receipts), else the first
month boundary after now. Its primary key becomes ``(id, receipt_id)``; its unique
``(receipt_id, payment_index)`` holds the key and stays exact. Its foreign key to ``receipts``
is declared partition by partition (``kuitti.partitions.MONTH_KEYS``): each month's payments
refer to the same month's receipts, so detaching a month of receipts checks no payments.
``receipt_deliveries``' key to ``receipts`` (0007's, on the parent) moves to its partitions the
same way. The keys on existing partitions are made ``NOT VALID`` (``kuitti db partitions
--validate`` reads their rows later); those of partitions made from now on are checked as rows
come.

Both databases: the foreign keys of ``card_purchases.payment_id`` and ``card_matches.payment_id``
are dropped (their unique constraints stay). A key to a partitioned table must name its
partition key (the receipt), and every key to it makes each detach of a month of payments read
the referring table; a month's drop clears both first (``kuitti.retention``).

Downgrade: refused on PostgreSQL (as 0007's); on SQLite the two keys come back.

Revision ID: 0009
Revises: 0008
Create Date: 2026-11-29 08:15:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

from alembic import op

from kuitti.partitioning import (
    declare_month_keys,
    ensure_months_from,
    legacy_bound,
    partition_in_place,
)
from kuitti.partitions import MONTH_KEYS, PARTITIONED

revision: str = "0009"
down_revision: str | None = "0008"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONTHS_AHEAD = 3
# Table → the foreign key of its ``payment_id`` to ``card_payments``.
PAYMENT_KEYS = {
    "card_purchases": "fk_card_purchases_payment_id_card_payments",
    "card_matches": "fk_card_matches_payment_id_card_payments",
}


def upgrade() -> None:
    bind = op.get_bind()
    for table, constraint in PAYMENT_KEYS.items():
        with op.batch_alter_table(table) as batch:
            batch.drop_constraint(constraint, type_="foreignkey")
    if bind.dialect.name != "postgresql":
        return
    now = datetime.now(UTC)  # ids carry the system clock's time (kuitti.ids)
    bound = legacy_bound(bind, "card_payments", now)
    partition_in_place(bind, "card_payments", "receipt_id", bound, PARTITIONED)
    ensure_months_from(bind, bound, now, MONTHS_AHEAD)
    for table in MONTH_KEYS:
        declare_month_keys(bind, table)


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        raise RuntimeError(
            "0009 is one-way on PostgreSQL: its partitions cannot be merged back in place"
        )
    for table, constraint in PAYMENT_KEYS.items():
        with op.batch_alter_table(table) as batch:
            batch.create_foreign_key(constraint, "card_payments", ["payment_id"], ["id"])
