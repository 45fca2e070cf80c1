"""bytes per receipt: one grant index by receipt instead of two, none of receipt numbers;
documents compressed

Grants: ``ix_receipt_grants_reading`` (partner, receipt) and ``ix_receipt_grants_receipt_id``
(receipt) become one index, ``ix_receipt_grants_receipt`` (receipt, partner). Every statement
that probed either names the receipt (the single read's rights check, the list's recheck of a
page, the existence check before a new grant, the returns' card grants, the foreign key's check
when a receipt is deleted), and a receipt has one grant or two, so the one index serves them
all: 74 bytes a receipt less on PostgreSQL, 50 on SQLite (bench/storage.py).

Receipts: ``ix_receipts_partner_number`` (partner, number, time) is gone. Its one query, a
return naming its purchase by number and time, finds it through the merchant's ``posted``
grants by the grants' listing index (partner, time), as rare as returns are; the index cost
every receipt 106 bytes on PostgreSQL, 88 on SQLite.

Documents: on PostgreSQL ``receipts.document`` is compressed with LZ4 again. Migration 0002 set
it, but 0007 made the partitioned table anew, without the column's compression, so every month's
partition compressed with pglz, the server's default: two to three times LZ4's CPU to write (50
against 20 µs for the mix's document, 250 against 85 µs at 60 rows) for documents 9-19 % smaller
(bench/storage.py --codecs). The partitions made from now on take the parent's compression.
On SQLite the documents are compressed by kuitti itself (``kuitti.db.DocumentText``, zstd):
no schema change; documents stored before stay as they are and read alike.

Locks (PostgreSQL): each partition's index is built ``CONCURRENTLY`` (writes go on) and attached
to the parent index, which is valid once every partition has its own; dropping the old
indexes and setting the compression take the table's exclusive lock for the catalog change only
(5-12 ms each, measured in docs/storage.md), with a ``lock_timeout`` so that a long
transaction on the table makes the migration fail, to be run again, instead of holding posts
behind it. A run stopped halfway goes on where it stopped.

Revision ID: 0010
Revises: 0009
Create Date: 2026-11-29 08:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

from kuitti.db import stored_document

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

Index = tuple[str, str, list[str]]  # name, table, columns
NEW: list[Index] = [("ix_receipt_grants_receipt", "receipt_grants", ["receipt_id", "partner_id"])]
OLD: list[Index] = [
    ("ix_receipt_grants_reading", "receipt_grants", ["partner_id", "receipt_id"]),
    ("ix_receipt_grants_receipt_id", "receipt_grants", ["receipt_id"]),
    ("ix_receipts_partner_number", "receipts", ["partner_id", "receipt_number", "receipt_time"]),
]
LOCK_TIMEOUT = "SET LOCAL lock_timeout = '5s'"


def upgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _replace_indexes_sqlite(NEW, OLD)
        return
    for name, table, columns in NEW:
        _create_index(name, table, columns)
    _drop_indexes(OLD)
    _document_compression("lz4")


def downgrade() -> None:
    if op.get_bind().dialect.name != "postgresql":
        _decompress_documents()
        _replace_indexes_sqlite(OLD, NEW)
        return
    _document_compression("default")
    for name, table, columns in OLD:
        _create_index(name, table, columns)
    _drop_indexes(NEW)


def _replace_indexes_sqlite(made: list[Index], dropped: list[Index]) -> None:
    for name, table, columns in made:
        op.create_index(name, table, columns)
    for name, table, _columns in dropped:
        op.drop_index(name, table_name=table)


def _create_index(name: str, table: str, columns: list[str]) -> None:
    """``name`` on ``table``, built without blocking writes: on a partitioned table, the
    parent's index first (``ON ONLY``: no rows, not yet valid), then each partition's,
    ``CONCURRENTLY``, attached to it."""
    bind = op.get_bind()
    listed = ", ".join(columns)
    partitioned = bind.execute(
        sa.text("SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(:table)"),
        {"table": table},
    ).scalar()
    if not partitioned:
        with op.get_context().autocommit_block():
            _drop_if_invalid(name)
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({listed})")
        return
    op.execute(f"CREATE INDEX IF NOT EXISTS {name} ON ONLY {table} ({listed})")
    with op.get_context().autocommit_block():
        children = bind.execute(
            sa.text(
                "SELECT c.relname, ("
                "  SELECT i.inhrelid::regclass::text FROM pg_inherits i"
                "  JOIN pg_index x ON x.indexrelid = i.inhrelid"
                "  WHERE i.inhparent = to_regclass(:index) AND x.indrelid = c.oid"
                ") FROM pg_inherits p JOIN pg_class c ON c.oid = p.inhrelid"
                " WHERE p.inhparent = to_regclass(:table)"
            ),
            {"index": name, "table": table},
        ).all()
        for partition, attached in children:
            if attached is not None:  # made since, with its partition, or by a run stopped
                continue
            child = f"{partition}_{'_'.join(columns)}_idx"  # the name PostgreSQL gives it
            _drop_if_invalid(child)
            op.execute(f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {child} ON {partition} ({listed})")
            op.execute(f"ALTER INDEX {name} ATTACH PARTITION {child}")


def _drop_if_invalid(index: str) -> None:
    """An index a stopped ``CREATE INDEX CONCURRENTLY`` left behind is invalid: made again."""
    valid = (
        op.get_bind()
        .execute(
            sa.text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:index)"),
            {"index": index},
        )
        .scalar()
    )
    if valid is False:
        op.execute(f"DROP INDEX CONCURRENTLY {index}")


def _drop_indexes(indexes: list[Index]) -> None:
    """A partitioned index cannot be dropped ``CONCURRENTLY``: one transaction drops them, each
    table locked for the catalog change only, waiting at most ``LOCK_TIMEOUT`` for the lock."""
    op.execute(LOCK_TIMEOUT)
    for name, _table, _columns in indexes:
        op.execute(f"DROP INDEX IF EXISTS {name}")


def _document_compression(method: str) -> None:
    """The documents' compression, on the parent (whose partitions made from now on take it)
    and on each partition, which PostgreSQL does not do for it (``default``: the server's
    ``default_toast_compression``). A server built without LZ4 keeps its default."""
    op.execute(LOCK_TIMEOUT)
    op.execute(
        f"""
        DO $$
        DECLARE
            part regclass;
        BEGIN
            IF '{method}' = 'default' OR '{method}' = ANY (
                SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'
            ) THEN
                ALTER TABLE receipts ALTER COLUMN document SET COMPRESSION {method};
                FOR part IN
                    SELECT inhrelid::regclass FROM pg_inherits
                    WHERE inhparent = 'receipts'::regclass
                LOOP
                    EXECUTE format(
                        'ALTER TABLE %s ALTER COLUMN document SET COMPRESSION {method}', part
                    );
                END LOOP;
            END IF;
        END $$
        """
    )


def _decompress_documents() -> None:
    """SQLite: the documents as text again (the revisions before this one read only text)."""
    bind = op.get_bind()
    while True:
        rows = bind.execute(
            sa.text("SELECT id, document FROM receipts WHERE typeof(document) = 'blob' LIMIT 500")
        ).all()
        if not rows:
            return
        bind.execute(
            sa.text("UPDATE receipts SET document = :document WHERE id = :id"),
            [{"id": row_id, "document": stored_document(document)} for row_id, document in rows],
        )
