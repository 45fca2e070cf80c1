"""Monthly partitions on PostgreSQL (docs/operations.md, "Partitions"); SQLite keeps plain tables.

The tables that grow with receipts are partitioned by range of a UUIDv7 key, one partition a
month: a row's *ingest month* (``Month.of_id``), not the receipt month of its receipt time
(``kuitti.months`` says why the two differ). A version 7 id starts with its creation time in
milliseconds (``kuitti.ids``), so the ids made in a month run from ``month.first_id`` to
``month.next.first_id``: a partition holds the rows *ingested* that month, by the server's clock.

==================  ============  ======================================================
table               key           why
==================  ============  ======================================================
receipts            id            the documents: most of the bytes
receipt_grants      receipt_id    one or more per receipt, the largest indexes; its
                                  receipt's month (migration 0012), primary key
                                  ``(id, receipt_id)``
receipt_deliveries  receipt_id    its primary key is (user_id, receipt_id)
card_payments       receipt_id    its receipt's month; ``(receipt_id, payment_index)``
                                  stays unique, its primary key is ``(id, receipt_id)``
==================  ============  ======================================================

Foreign keys. A key to a partitioned table costs its month's drop a check: detaching a
referenced partition makes PostgreSQL look for referring rows in every table whose key was
declared on the parent (a join over the whole referring table). So ``card_payments``,
``receipt_grants`` and ``receipt_deliveries`` refer to ``receipts`` partition by partition, each
month's rows to the same month's receipts (``MONTH_KEYS``; the legacy partitions to
``receipts_legacy`` when they share its bound, the default and any other to the parent), and
nothing refers to ``card_payments`` by a foreign key: ``card_matches`` and ``card_purchases``
name a payment by its id (unique in each), and a month's drop clears them first
(``kuitti.retention``), as the card-matching queue always did. The unpartitioned tables that
refer to ``receipts`` (links, claims, matches, e-mails) keep their keys on the parent; a drop
makes their checks index nested loops (``kuitti.retention.probe_referring_rows``).

The rest stays unpartitioned, each for a reason: ``receipt_links`` (its primary key is the
RECEIPT_ID's uniqueness per namespace, exact across months) and ``idempotency_records`` (the
key's uniqueness per partner) are the small lookup tables that keep uniqueness exact;
``receipt_claims`` and ``card_matches`` are a fraction of the receipts; the outboxes
(``webhook_deliveries``, ``webhook_attempts``, ``mail_messages``) are emptied by their own
retention within weeks, and their claim (``SKIP LOCKED`` on the pending index) would otherwise
visit every month's index.

Partitions are made ahead by kuitti itself: the worker's hourly housekeeping and
``kuitti db partitions --ahead N`` (pg_partman cannot range-partition on a UUID). A row whose
month has no partition goes to the table's ``_default`` partition, so a post never fails for
lack of one; a month whose rows sit in the default is not given a partition of its own (that
would fail), and its rows stay there until retention deletes them.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from kuitti.months import Month

# Partitioned table → its partition key. Children first: the order in which a month is dropped.
PARTITIONED: dict[str, str] = {
    "receipt_deliveries": "receipt_id",
    "receipt_grants": "receipt_id",
    "card_payments": "receipt_id",
    "receipts": "id",
}
# Table → (column, table): a foreign key declared partition by partition, from each month's
# partition to the referred table's partition of the same month.
MONTH_KEYS: dict[str, tuple[str, str]] = {
    "receipt_deliveries": ("receipt_id", "receipts"),
    "receipt_grants": ("receipt_id", "receipts"),
    "card_payments": ("receipt_id", "receipts"),
}
# A partition's name: the table's, then the month (``receipts_p202611``).
_MONTH_NAME = re.compile(r"_p(\d{4})(\d{2})$")
_BOUND = re.compile(r"FROM \((?:'([0-9a-f-]+)'|MINVALUE)\) TO \('([0-9a-f-]+)'\)")


def is_partition(table: str) -> bool:
    """Whether ``table`` names a partition of a partitioned table (Alembic's comparison of
    the schema with the models leaves partitions out: the models declare their parents)."""
    return any(
        table.startswith(f"{parent}_")
        and (table.endswith(("_legacy", "_default")) or _MONTH_NAME.search(table) is not None)
        for parent in PARTITIONED
    )


def compared(item: object, name: str | None, kind: str, reflected: bool, _other: object) -> bool:
    """Alembic's ``include_object``: leave out the partitions, the foreign keys PostgreSQL
    derives for each partition of a referenced table (the parents' keys are compared), and the
    keys of ``MONTH_KEYS``, declared per partition on PostgreSQL (on the table on SQLite)."""
    if kind == "table" and name is not None:
        return not is_partition(name)
    if kind == "foreign_key_constraint":
        referred = getattr(item, "referred_table").name  # noqa: B009
        if getattr(item, "parent").name in MONTH_KEYS:  # noqa: B009
            return False
        return not (reflected and is_partition(referred))
    return True


def partition_name(table: str, month: Month) -> str:
    return f"{table}_p{month.year:04d}{month.month:02d}"


@dataclass(frozen=True)
class Partition:
    """One partition of ``table``: a month's, the default (``low`` and ``high`` None), or the
    rows from before partitioning (``low`` None, ``high`` the first month's first id)."""

    table: str
    name: str
    low: uuid.UUID | None
    high: uuid.UUID | None

    @property
    def month(self) -> Month | None:
        """The ingest month whose rows the partition holds (None: default or legacy)."""
        found = _MONTH_NAME.search(self.name)
        return Month(int(found[1]), int(found[2])) if found else None


def _connection(target: Session | Connection) -> Connection:
    return target.connection() if isinstance(target, Session) else target


def _relkind(connection: Connection, table: str) -> str | None:
    return connection.execute(
        text("SELECT relkind::text FROM pg_class WHERE oid = to_regclass(:table)"),
        {"table": table},
    ).scalar()


def is_partitioned(target: Session | Connection, table: str = "receipts") -> bool:
    """Whether this database partitions ``table`` (PostgreSQL after migration 0007; 0009 for
    ``card_payments``)."""
    connection = _connection(target)
    if connection.dialect.name != "postgresql":
        return False
    return _relkind(connection, table) == "p"


def partition_key(target: Session | Connection, table: str) -> str | None:
    """The column ``table`` is partitioned by range of on this database (None: a plain
    table, or SQLite)."""
    connection = _connection(target)
    if not is_partitioned(connection, table):
        return None
    definition = connection.execute(
        text("SELECT pg_get_partkeydef(to_regclass(:table))"), {"table": table}
    ).scalar_one()
    return str(definition).removeprefix("RANGE (").removesuffix(")")


def is_partition_of(target: Session | Connection, name: str, table: str) -> bool:
    """Whether ``name`` is a partition of ``table``."""
    return (
        _connection(target)
        .execute(
            text(
                "SELECT 1 FROM pg_inherits WHERE inhrelid = to_regclass(:name)"
                " AND inhparent = to_regclass(:table)"
            ),
            {"name": name, "table": table},
        )
        .first()
        is not None
    )


def partitions(target: Session | Connection, table: str) -> list[Partition]:
    """The partitions of ``table``, by their bounds (the default last)."""
    rows = _connection(target).execute(
        text(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid) FROM pg_inherits i"
            " JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = to_regclass(:table)"
        ),
        {"table": table},
    )
    found = []
    for name, bound in rows:
        match = _BOUND.search(bound)
        if match is None:
            found.append(Partition(table, name, None, None))
        else:
            low = uuid.UUID(match[1]) if match[1] else None
            found.append(Partition(table, name, low, uuid.UUID(match[2])))
    return sorted(found, key=lambda p: (p.high is None, p.high or uuid.UUID(int=0)))


def same_range(
    target: Session | Connection, table: str, low: uuid.UUID | None, high: uuid.UUID | None
) -> str:
    """The partition of ``table`` with exactly these bounds, else ``table`` itself: what a
    partition of that range refers to (``MONTH_KEYS``)."""
    for partition in partitions(target, table):
        if (partition.low, partition.high) == (low, high) and high is not None:
            return partition.name
    return table


def month_key(table: str, partition: str, referred: str) -> str:
    """The DDL of ``partition``'s foreign key to ``referred`` (``MONTH_KEYS``)."""
    column = MONTH_KEYS[table][0]
    return (
        f"ALTER TABLE {partition} ADD CONSTRAINT fk_{partition}_{column}"
        f" FOREIGN KEY ({column}) REFERENCES {referred} (id)"
    )


def ensure_month_partitions(target: Session | Connection, month: Month) -> list[str]:
    """Make sure every partitioned table has a partition for ``month``; the partitions made.

    A no-op on SQLite and on a month already covered (its own partition, or the partition of
    the rows from before partitioning). A month with rows in a table's default partition gets
    no partition of that table (PostgreSQL would refuse it): its rows stay in the default; nor
    does a table of ``MONTH_KEYS`` whose referred table has no partition of the month (its rows
    go to its default, whose key refers to the parent). Creating a partition locks its table
    for a moment; ``lock_timeout`` keeps a busy table from queueing posts behind the wait, and
    the next call tries again."""
    connection = _connection(target)
    if not is_partitioned(connection):
        return []
    low, high = month.first_id, month.next.first_id
    made = []
    for table, key in reversed(PARTITIONED.items()):  # a referred table before its referrers
        if partition_key(connection, table) != key:
            continue  # card_payments between migrations 0007 and 0009, grants before 0012
        existing = partitions(connection, table)
        if any(
            p.high is not None and (p.low is None or p.low < high) and low < p.high
            for p in existing
        ):
            continue
        referred = None
        if table in MONTH_KEYS:
            referred = same_range(connection, MONTH_KEYS[table][1], low, high)
            if referred == MONTH_KEYS[table][1]:
                continue
        default = f"{table}_default"
        held = connection.execute(
            text(f"SELECT 1 FROM {default} WHERE {key} >= :low AND {key} < :high LIMIT 1"),  # noqa: S608
            {"low": low, "high": high},
        ).first()
        if held is not None:
            continue
        name = partition_name(table, month)
        with connection.begin_nested():
            connection.execute(text("SET LOCAL lock_timeout = '5s'"))
            connection.execute(
                text(
                    f"CREATE TABLE {name} PARTITION OF {table}"
                    f" FOR VALUES FROM ('{low}') TO ('{high}')"
                )
            )
            if referred is not None:
                connection.execute(text(month_key(table, name, referred)))
        made.append(name)
    return made


def ensure_partitions_ahead(target: Session | Connection, now: datetime, ahead: int) -> list[str]:
    """Partitions for this month and the ``ahead`` months after it; the partitions made."""
    made = []
    for count in range(ahead + 1):
        made += ensure_month_partitions(target, Month.of(now) + count)
    return made


def partition_summary(connection: Connection, table: str) -> list[dict[str, object]]:
    """``table``'s partitions (``kuitti db partitions``): their bounds, the ingest month they
    hold, estimated rows, and the partition a ``MONTH_KEYS`` table's partition refers to."""
    summary: list[dict[str, object]] = []
    for partition in partitions(connection, table):
        rows, refers_to = connection.execute(
            text(
                "SELECT c.reltuples::bigint, (SELECT k.confrelid::regclass::text"
                " FROM pg_constraint k WHERE k.conrelid = c.oid AND k.contype = 'f'"
                " AND k.conparentid = 0 LIMIT 1)"
                " FROM pg_class c WHERE c.oid = to_regclass(:name)"
            ),
            {"name": partition.name},
        ).one()
        summary.append(
            {
                "name": partition.name,
                "month": str(partition.month) if partition.month else None,
                "from": str(partition.low) if partition.low else None,
                "to": str(partition.high) if partition.high else None,
                "rows": max(int(rows or 0), 0),
                "refers_to": refers_to if table in MONTH_KEYS else None,
            }
        )
    return summary
