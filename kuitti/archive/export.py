"""Export: one month of receipts from the database into an archive file.

Everything is read in one read-only transaction, a snapshot (``REPEATABLE READ`` on PostgreSQL;
on SQLite a read transaction is one), so the archive is the month as it stood at one moment
while posts go on. The month's receipts are read once, in id order, as a stream; each batch of
them then fetches its rows of the other tables through their receipt-id indexes.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from pathlib import Path
from typing import Any

from alembic.runtime.migration import MigrationContext
from sqlalchemy import Connection, Row, select

import kuitti
from kuitti.archive.fileformat import ArchiveWriter
from kuitti.archive.tables import PARTS, RECEIPTS, Part
from kuitti.db import Database
from kuitti.months import Month

BATCH = 1000

NOT_INCLUDED = (
    "sandbox receipts",
    "e-mails and webhook deliveries (logs with retentions of their own)",
    "idempotency records",
    "the card-matching queue",
    "partners, namespaces, users, connections, cards and card purchases (they stay in the "
    "database; a restore checks that they are there)",
)


def month_receipts(month: Month) -> Any:
    """The production receipts whose ``receipt_time`` falls in ``month``, in id order."""
    receipts = RECEIPTS.table
    return (
        select(receipts)
        .where(
            receipts.c.receipt_time >= month.start,
            receipts.c.receipt_time < month.end,
            receipts.c.sandbox.is_(False),
        )
        .order_by(receipts.c.id)
    )


def _rows_of(connection: Connection, part: Part, ids: list[Any]) -> list[Row[Any]]:
    column = part.table.c[part.receipt_column]
    rows = list(connection.execute(select(part.table).where(column.in_(ids))))
    # In receipt order (then the table's own key), as the format requires of every member.
    position = {receipt_id: index for index, receipt_id in enumerate(ids)}
    at = part.columns.index(part.receipt_column)
    keys = [part.columns.index(c.name) for c in part.table.primary_key.columns]
    rows.sort(key=lambda row: (position[row[at]], *(str(row[k]) for k in keys)))
    return rows


def export_month(db: Database, month: Month, path: Path, *, now: datetime) -> dict[str, Any]:
    """Write ``month`` to ``path``; the manifest written."""
    writer = ArchiveWriter(path)
    try:
        options: dict[str, Any] = {} if db.is_sqlite else {"isolation_level": "REPEATABLE READ"}
        with db.engine.connect().execution_options(**options) as connection, connection.begin():
            revision = MigrationContext.configure(connection).get_current_revision()
            stream = connection.execution_options(yield_per=BATCH).execute(month_receipts(month))
            for batch in stream.partitions():
                receipts: Sequence[Row[Any]] = batch
                writer.write(RECEIPTS.name, receipts)
                ids = [row[0] for row in receipts]
                for part in PARTS[1:]:
                    writer.write(part.name, _rows_of(connection, part, ids))
        return writer.finish(
            {
                "month": str(month),
                "month_of": "receipt_time, in UTC",
                "from": month.start.isoformat(),
                "until": month.end.isoformat(),
                "created_at": now.isoformat(),
                "kuitti_version": kuitti.__version__,
                "schema_revision": revision,
                "source_database": db.dialect,
                "not_included": list(NOT_INCLUDED),
            }
        )
    except BaseException:
        writer.abandon()
        raise
