"""Monthly partitions on PostgreSQL (docs/operations.md, "Partitions"); SQLite keeps plain tables.

The tables that grow with receipts are partitioned by range of a UUIDv7 key, one partition a
month. A version 7 id starts with its creation time in milliseconds (``kuitti.ids``), so the
range of ids made in a month runs from ``month_floor(month)`` (that month's first millisecond,
every other bit zero) to the next month's floor: a partition holds the rows *ingested* that
month, by the server's clock. Keyed on the id, every primary key and foreign key stays as it
was (a partitioned table's primary key must hold its partition key, and the id is the key).

==================  ============  ======================================================
table               key           why
==================  ============  ======================================================
receipts            id            the documents: most of the bytes
receipt_grants      id            one or more per receipt, the largest indexes
receipt_deliveries  receipt_id    its primary key is (user_id, receipt_id)
==================  ============  ======================================================

The rest stays unpartitioned, each for a reason: ``receipt_links`` (its primary key is the
RECEIPT_ID's uniqueness per namespace, exact across months) and ``idempotency_records`` (the
key's uniqueness per partner) are the small lookup tables that keep uniqueness exact;
``card_payments`` keeps its unique ``(receipt_id, payment_index)``, which a table partitioned
by its id could not (a partitioned table's unique index must hold the partition key);
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
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import Connection, Engine, text
from sqlalchemy.orm import Session

# Partitioned table → its partition key. Children first: the order in which a month is dropped.
PARTITIONED: dict[str, str] = {
    "receipt_deliveries": "receipt_id",
    "receipt_grants": "id",
    "receipts": "id",
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
    """Alembic's ``include_object``: leave out the partitions and the foreign keys PostgreSQL
    derives for each partition of a referenced table (the parents' keys are compared)."""
    if kind == "table" and name is not None:
        return not is_partition(name)
    if kind == "foreign_key_constraint" and reflected:
        return not is_partition(getattr(item, "referred_table").name)  # noqa: B009
    return True


def month_of(moment: datetime) -> date:
    """The first day of ``moment``'s month (UTC)."""
    moment = moment.astimezone(UTC)
    return date(moment.year, moment.month, 1)


def add_months(month: date, count: int) -> date:
    index = month.year * 12 + month.month - 1 + count
    return date(index // 12, index % 12 + 1, 1)


def month_start(month: date) -> datetime:
    return datetime(month.year, month.month, 1, tzinfo=UTC)


def month_floor(month: date) -> uuid.UUID:
    """The smallest version 7 id made in ``month``: its first millisecond, every other bit
    zero. Ids compare as their bytes do, in PostgreSQL as in Python."""
    milliseconds = int(month_start(month).timestamp() * 1000)
    return uuid.UUID(int=milliseconds << 80)


def month_of_id(row_id: uuid.UUID) -> date:
    """The month a version 7 id was made in: the partition that holds its row."""
    return month_of(datetime.fromtimestamp((row_id.int >> 80) / 1000, UTC))


def partition_name(table: str, month: date) -> str:
    return f"{table}_p{month.year:04d}{month.month:02d}"


@dataclass(frozen=True)
class Partition:
    """One partition of ``table``: a month's, the default (``low`` and ``high`` None), or the
    rows from before partitioning (``low`` None, ``high`` the first month's floor)."""

    table: str
    name: str
    low: uuid.UUID | None
    high: uuid.UUID | None

    @property
    def month(self) -> date | None:
        found = _MONTH_NAME.search(self.name)
        return date(int(found[1]), int(found[2]), 1) if found else None


def _connection(target: Session | Connection) -> Connection:
    return target.connection() if isinstance(target, Session) else target


def is_partitioned(target: Session | Connection) -> bool:
    """Whether this database partitions (PostgreSQL after migration 0007)."""
    connection = _connection(target)
    if connection.dialect.name != "postgresql":
        return False
    kind = connection.execute(
        text("SELECT relkind FROM pg_class WHERE oid = to_regclass('receipts')")
    ).scalar()
    return kind == "p"


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


def ensure_month_partitions(target: Session | Connection, month: date) -> list[str]:
    """Make sure every partitioned table has a partition for ``month``; the partitions made.

    A no-op on SQLite and on a month already covered (its own partition, or the partition of
    the rows from before partitioning). A month with rows in a table's default partition gets
    no partition of that table (PostgreSQL would refuse it): its rows stay in the default.
    Creating a partition locks its table for a moment; ``lock_timeout`` keeps a busy table
    from queueing posts behind the wait, and the next call tries again."""
    connection = _connection(target)
    if not is_partitioned(connection):
        return []
    low, high = month_floor(month), month_floor(add_months(month, 1))
    made = []
    for table, key in PARTITIONED.items():
        existing = partitions(connection, table)
        if any(
            p.high is not None and (p.low is None or p.low < high) and low < p.high
            for p in existing
        ):
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
        made.append(name)
    return made


def ensure_partitions_ahead(target: Session | Connection, now: datetime, ahead: int) -> list[str]:
    """Partitions for this month and the ``ahead`` months after it; the partitions made."""
    made = []
    for count in range(ahead + 1):
        made += ensure_month_partitions(target, add_months(month_of(now), count))
    return made


def first_partitioned_month(now: datetime) -> date:
    """Migration 0007's first month with partitions of its own: the next month, or the one
    after if the next begins within a day (the existing tables take rows until then)."""
    month = add_months(month_of(now), 1)
    if month_start(month) - now < timedelta(days=1):
        month = add_months(month, 1)
    return month


def legacy_check(table: str) -> str:
    """The CHECK constraint that bounds ``table``'s rows from before partitioning."""
    return f"ck_{table}_legacy_bound"


def prepare_partitioning(engine: Engine, now: datetime) -> list[str]:
    """Before migration 0007, while the service runs: add each table's bound as a CHECK
    constraint ``NOT VALID`` (a moment's lock) and validate it (reads the table without
    blocking writes), each in a transaction of its own; what was done."""
    bound = month_floor(first_partitioned_month(now))
    done: list[str] = []
    with engine.connect() as connection:
        if is_partitioned(connection):
            return done
        connection.commit()
        for table, key in PARTITIONED.items():
            check = legacy_check(table)
            with connection.begin():
                connection.execute(text("SET LOCAL lock_timeout = '5s'"))
                connection.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {check}"))
                connection.execute(
                    text(
                        f"ALTER TABLE {table} ADD CONSTRAINT {check}"
                        f" CHECK ({key} < '{bound}') NOT VALID"
                    )
                )
            with connection.begin():
                connection.execute(text(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}"))
            done.append(f"{check}: {key} < {bound}")
    return done


def validate_foreign_keys(engine: Engine) -> list[str]:
    """Validate every foreign key left ``NOT VALID`` (migration 0007 re-points those of the
    unpartitioned tables so), each in a transaction of its own: reads the table, blocks no
    writes; what was validated."""
    done = []
    with engine.connect() as connection:
        pending = connection.execute(
            text(
                "SELECT conrelid::regclass::text, conname FROM pg_constraint"
                " WHERE contype = 'f' AND NOT convalidated AND conparentid = 0"
            )
        ).all()
        connection.commit()
        for table, name in pending:
            with connection.begin():
                connection.execute(text(f"ALTER TABLE {table} VALIDATE CONSTRAINT {name}"))
            done.append(f"{table}.{name} validated")
    return done


def partition_summary(connection: Connection, table: str) -> list[dict[str, object]]:
    """``table``'s partitions, their bounds and estimated rows (``kuitti db partitions``)."""
    summary: list[dict[str, object]] = []
    for partition in partitions(connection, table):
        rows = connection.execute(
            text("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(:name)"),
            {"name": partition.name},
        ).scalar()
        summary.append(
            {
                "name": partition.name,
                "from": str(partition.low) if partition.low else None,
                "to": str(partition.high) if partition.high else None,
                "rows": max(int(rows or 0), 0),
            }
        )
    return summary
