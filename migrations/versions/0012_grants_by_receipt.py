"""receipt grants partitioned by their receipt's month (PostgreSQL), their key declared per month

PostgreSQL: ``receipt_grants`` was partitioned by range of its own id (0007), the month a grant
was made, with its foreign key to ``receipts`` declared on the parent: every detach of a month of
receipts made PostgreSQL look for grants of that month in the whole table (2.97 s of a month's
5.8 s drop with 2.25 million grants stored, growing with every month kept). Now it is
partitioned by range of ``receipt_id`` with the bounds of ``receipts``' partitions, as
``card_payments`` (0009), and its key to ``receipts`` is declared partition by partition
(``kuitti.partitions.MONTH_KEYS``): a month's grants, whenever made, sit in their receipt's month
and go with it.

Nothing is copied from the rows made before 0007: ``receipt_grants_legacy`` (grants made before
``receipts_legacy``'s bound, so of its receipts) is detached and becomes the new table's legacy
partition, up to that same bound (``kuitti.partitioning.repartition_in_place``), with its
``CHECK (receipt_id < bound)`` and primary key ``(id, receipt_id)`` index built by ``kuitti db
partitions --prepare`` beforehand, or here under the lock. The rows of the old month and default
partitions (grants made since 0007) are copied into the new partitions under the lock, and the
old ones dropped. The legacy partition's key refers to ``receipts_legacy`` ``NOT VALID``
(``kuitti db partitions --validate`` reads its rows later). Queries are unchanged: the grants are
read by receipt (one partition) or by the listing index (partner, receipt time), one range in
each partition.

SQLite: nothing (plain tables).

Downgrade: refused on PostgreSQL, as 0007's and 0009's.

Revision ID: 0012
Revises: 0011
Create Date: 2026-11-29 11:30:00
"""

from collections.abc import Sequence
from datetime import UTC, datetime

from alembic import op

from kuitti.partitioning import (
    declare_month_keys,
    ensure_months_from,
    legacy_bound,
    repartition_in_place,
)
from kuitti.partitions import PARTITIONED

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

MONTHS_AHEAD = 3


def upgrade() -> None:
    bind = op.get_bind()
    if bind.dialect.name != "postgresql":
        return
    now = datetime.now(UTC)  # ids carry the system clock's time (kuitti.ids)
    bound = legacy_bound(bind, "receipt_grants", now)
    moved = repartition_in_place(bind, "receipt_grants", "receipt_id", bound, PARTITIONED)
    ensure_months_from(bind, bound, now, MONTHS_AHEAD)
    op.execute(f"INSERT INTO receipt_grants SELECT * FROM {moved}")  # noqa: S608
    declare_month_keys(bind, "receipt_grants")


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        raise RuntimeError(
            "0012 is one-way on PostgreSQL: its partitions cannot be merged back in place"
        )
