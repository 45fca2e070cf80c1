"""Turning existing tables into partitioned ones in place, on a database in service (PostgreSQL):
what migrations ``0007`` (receipts, grants, deliveries), ``0009`` (card payments) and ``0012``
(grants again, by their receipt) do, and the online steps around them, ``kuitti db partitions
--prepare`` before and ``--validate`` after (docs/operations.md, "Partitions"). Nothing is
copied from before partitioning: the table is renamed ``<table>_legacy`` and attached as the
partition of every row before a month boundary, which a validated ``CHECK`` lets PostgreSQL take
without reading the table."""

from __future__ import annotations

import uuid
from collections.abc import Collection
from datetime import datetime, timedelta

from sqlalchemy import Connection, Engine, text

from kuitti.months import Month
from kuitti.partitions import (
    MONTH_KEYS,
    PARTITIONED,
    ensure_month_partitions,
    is_partitioned,
    month_key,
    partition_key,
    partitions,
    same_range,
)


def first_partitioned_month(now: datetime) -> Month:
    """The first month with partitions of its own when a table is partitioned now: the next
    month, or the one after if the next begins within a day (the existing table takes rows
    until then)."""
    month = Month.of(now) + 1
    if month.start - now < timedelta(days=1):
        month += 1
    return month


def legacy_bound(connection: Connection, table: str, now: datetime) -> uuid.UUID:
    """Where ``table``'s rows from before partitioning end (its ``_legacy`` partition's upper
    bound): the first partitioned month's first id. A table partitioned after ``receipts``
    (``card_payments``, 0009) ends where ``receipts_legacy`` does while it holds no row beyond,
    so that its legacy partition, like its months, refers to the receipts of the same range;
    else at the month boundary after its newest row (and no earlier than the first month). A
    table partitioned by another key (``receipt_grants`` by its own id, 0007) is re-partitioned
    (``repartition_in_place``): its legacy partition keeps the rows of ``receipts_legacy``'s
    receipts, and ends where that does."""
    first = first_partitioned_month(now)
    legacy = [p.high for p in partitions(connection, "receipts") if p.name == "receipts_legacy"]
    if table == "receipts" or not legacy or legacy[0] is None:
        return first.first_id
    if is_partitioned(connection, table):
        return legacy[0]
    key = PARTITIONED[table]
    newest = connection.execute(
        text(f"SELECT {key} FROM {table} ORDER BY {key} DESC LIMIT 1")  # noqa: S608
    ).scalar()
    if newest is None or newest < legacy[0]:
        return legacy[0]
    return max(first, Month.of_id(newest) + 1).first_id


def legacy_check(table: str) -> str:
    """The CHECK constraint that bounds ``table``'s rows from before partitioning."""
    return f"ck_{table}_legacy_bound"


def prepare_partitioning(engine: Engine, now: datetime) -> list[str]:
    """Before migrations 0007, 0009 and 0012, while the service runs: add each table's bound
    as a CHECK constraint ``NOT VALID`` (a moment's lock) and validate it (reads the table
    without blocking writes), each in a transaction of its own, and build the index of its
    primary key with the partition key added; what was done. Tables partitioned by their key
    are left as they are; one partitioned by another (``receipt_grants`` by id before 0012) has
    these made on its legacy partition, which becomes the legacy partition of the new key."""
    done: list[str] = []
    with engine.connect() as connection:
        for table, key in reversed(PARTITIONED.items()):
            if connection.dialect.name != "postgresql" or partition_key(connection, table) == key:
                continue
            target = f"{table}_legacy" if is_partitioned(connection, table) else table
            bound = legacy_bound(connection, table, now)
            connection.commit()
            check = legacy_check(table)
            with connection.begin():
                connection.execute(text("SET LOCAL lock_timeout = '5s'"))
                connection.execute(text(f"ALTER TABLE {target} DROP CONSTRAINT IF EXISTS {check}"))
                connection.execute(
                    text(
                        f"ALTER TABLE {target} ADD CONSTRAINT {check}"
                        f" CHECK ({key} < '{bound}') NOT VALID"
                    )
                )
            with connection.begin():
                connection.execute(text(f"ALTER TABLE {target} VALIDATE CONSTRAINT {check}"))
            done.append(f"{check}: {key} < {bound}")
            columns = _widened_primary_key(connection, target, key)
            connection.commit()
            if columns is not None:
                index = primary_key_index(table)
                # Built without blocking writes: outside a transaction, CONCURRENTLY.
                with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as builder:
                    builder.execute(text(f"DROP INDEX CONCURRENTLY IF EXISTS {index}"))
                    builder.execute(
                        text(f"CREATE UNIQUE INDEX CONCURRENTLY {index} ON {target} ({columns})")
                    )
                done.append(f"{index}: ({columns})")
    return done


def primary_key_index(table: str) -> str:
    """The unique index that becomes ``table``'s primary key with its partition key added."""
    return f"ix_{table}_partition_pk"


def _widened_primary_key(connection: Connection, table: str, key: str) -> str | None:
    """``table``'s primary key columns with ``key`` added; None when it holds ``key``."""
    columns = list(
        connection.execute(
            text(
                "SELECT a.attname FROM pg_constraint c"
                " JOIN unnest(c.conkey) WITH ORDINALITY AS k(attnum, n) ON true"
                " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = k.attnum"
                " WHERE c.conrelid = to_regclass(:table) AND c.contype = 'p' ORDER BY k.n"
            ),
            {"table": table},
        ).scalars()
    )
    return None if key in columns else ", ".join([*columns, key])


def _widen_primary_key(bind: Connection, table: str, key: str) -> None:
    """Make ``table``'s primary key hold ``key`` (a partitioned table's must): through the
    index ``--prepare`` built, else one built here, under the migration's lock."""
    columns = _widened_primary_key(bind, table, key)
    if columns is None:
        return
    index = primary_key_index(table)
    valid = bind.execute(
        text("SELECT indisvalid FROM pg_index WHERE indexrelid = to_regclass(:index)"),
        {"index": index},
    ).scalar()
    if not valid:
        bind.execute(text(f"DROP INDEX IF EXISTS {index}"))
        bind.execute(text(f"CREATE UNIQUE INDEX {index} ON {table} ({columns})"))
    primary = bind.execute(
        text(
            "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(:t) AND contype = 'p'"
        ),
        {"t": table},
    ).scalar_one()
    bind.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {primary}"))
    bind.execute(
        text(f"ALTER TABLE {table} ADD CONSTRAINT {primary} PRIMARY KEY USING INDEX {index}")
    )


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


def referencing_foreign_keys(
    bind: Connection, tables: Collection[str]
) -> list[tuple[str, str, str]]:
    """Every foreign key that references one of ``tables``: name, table, DDL."""
    rows = bind.execute(
        text(
            "SELECT conname, conrelid::regclass::text, pg_get_constraintdef(oid)"
            " FROM pg_constraint WHERE contype = 'f'"
            " AND confrelid::regclass::text = ANY(:tables)"
        ),
        {"tables": list(tables)},
    )
    return [(name, table, definition) for name, table, definition in rows]


def _ensure_check(bind: Connection, table: str, key: str, bound: uuid.UUID) -> None:
    """The validated CHECK of ``table``'s bound: ``--prepare``'s if it made it for this bound,
    else added and validated here (a read of the table under the migration's lock)."""
    check = legacy_check(table)
    found = bind.execute(
        text(
            "SELECT convalidated, pg_get_constraintdef(oid) FROM pg_constraint"
            " WHERE conname = :name AND conrelid = to_regclass(:table)"
        ),
        {"name": check, "table": table},
    ).first()
    if found is not None and f"({key} < '{bound}'" in found[1]:
        if not found[0]:
            bind.execute(text(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}"))
        return
    bind.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT IF EXISTS {check}"))
    bind.execute(
        text(f"ALTER TABLE {table} ADD CONSTRAINT {check} CHECK ({key} < '{bound}') NOT VALID")
    )
    bind.execute(text(f"ALTER TABLE {table} VALIDATE CONSTRAINT {check}"))


def partition_in_place(
    bind: Connection, table: str, key: str, bound: uuid.UUID, partitioned: Collection[str]
) -> None:
    """Make ``table`` partitioned by range of ``key``: the existing table becomes
    ``<table>_legacy``, the partition of every row below ``bound``, beside a ``_default``
    partition. Its indexes and keys move to the new parent (a primary key without ``key``
    gets it appended: a partitioned table's unique indexes must hold it); its keys to tables of
    ``partitioned`` are dropped from the legacy table (they move to the parent), and its key of
    ``MONTH_KEYS`` is dropped for ``declare_month_keys`` to declare on each partition."""
    legacy = f"{table}_legacy"
    check = legacy_check(table)
    _ensure_check(bind, table, key, bound)
    _widen_primary_key(bind, table, key)
    indexes = list(
        bind.execute(
            text(
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
            text(
                "SELECT conname, pg_get_constraintdef(oid), confrelid::regclass::text"
                " FROM pg_constraint WHERE contype IN ('f', 'c') AND conparentid = 0"
                " AND conrelid = to_regclass(:table) AND conname <> :check"
            ),
            {"table": table, "check": check},
        )
    )
    # A table partitioned by another key than today's (grants by id in 0007) keeps its key to
    # the referred table on the parent.
    month_keyed = MONTH_KEYS.get(table) if PARTITIONED.get(table) == key else None
    bind.execute(text(f"ALTER TABLE {table} RENAME TO {legacy}"))
    for name, _definition, primary in indexes:
        if primary:
            bind.execute(
                text(f"ALTER TABLE {legacy} RENAME CONSTRAINT {primary} TO {primary}_legacy")
            )
        else:
            bind.execute(text(f"ALTER INDEX {name} RENAME TO {name}_legacy"))
    parent_keys = []
    for name, definition, referenced in own_keys:
        if month_keyed is not None and referenced == month_keyed[1]:
            bind.execute(text(f"ALTER TABLE {legacy} DROP CONSTRAINT {name}"))
        elif referenced in partitioned:
            # A key to a table that is now a partition must point at its new parent instead.
            bind.execute(text(f"ALTER TABLE {legacy} DROP CONSTRAINT {name}"))
            parent_keys.append((name, definition))
        else:
            bind.execute(text(f"ALTER TABLE {legacy} RENAME CONSTRAINT {name} TO {name}_legacy"))
            parent_keys.append((name, definition))
    bind.execute(
        text(
            f"CREATE TABLE {table} (LIKE {legacy} INCLUDING DEFAULTS INCLUDING GENERATED)"
            f" PARTITION BY RANGE ({key})"
        )
    )
    for _name, definition, primary in indexes:
        if primary:
            columns = definition[definition.index("(") + 1 : definition.rindex(")")]
            bind.execute(
                text(f"ALTER TABLE {table} ADD CONSTRAINT {primary} PRIMARY KEY ({columns})")
            )
        else:
            bind.execute(text(definition.replace(f" ON public.{table} ", f" ON {table} ")))
    for name, definition in parent_keys:
        bind.execute(text(f"ALTER TABLE {table} ADD CONSTRAINT {name} {definition}"))
    bind.execute(
        text(
            f"ALTER TABLE {table} ATTACH PARTITION {legacy}"
            f" FOR VALUES FROM (MINVALUE) TO ('{bound}')"
        )
    )
    bind.execute(text(f"CREATE TABLE {table}_default PARTITION OF {table} DEFAULT"))


def declare_month_keys(bind: Connection, table: str) -> list[str]:
    """Declare ``table``'s foreign key of ``MONTH_KEYS`` on each of its partitions instead of
    its parent: a month's partition refers to the referred table's partition of the same
    range, the default and any partition without one to the referred parent. Made ``NOT
    VALID`` (a moment's lock; ``kuitti db partitions --validate`` reads the rows later); a
    partition that has the key already keeps it. The partitions given a key."""
    column, referred = MONTH_KEYS[table]
    if partition_key(bind, table) != PARTITIONED[table]:
        return []  # grants in migration 0009, partitioned by id until 0012
    on_parent = bind.execute(
        text(
            "SELECT conname FROM pg_constraint WHERE conrelid = to_regclass(:table)"
            " AND contype = 'f' AND conparentid = 0 AND confrelid = to_regclass(:referred)"
        ),
        {"table": table, "referred": referred},
    ).scalars()
    for name in list(on_parent):
        bind.execute(text(f"ALTER TABLE {table} DROP CONSTRAINT {name}"))
    declared = []
    for partition in partitions(bind, table):
        exists = bind.execute(
            text("SELECT 1 FROM pg_constraint WHERE conname = :name"),
            {"name": f"fk_{partition.name}_{column}"},
        ).first()
        if exists is None:
            target = same_range(bind, referred, partition.low, partition.high)
            bind.execute(text(month_key(table, partition.name, target) + " NOT VALID"))
            declared.append(partition.name)
    return declared


def repartition_in_place(
    bind: Connection, table: str, key: str, bound: uuid.UUID, partitioned: Collection[str]
) -> str:
    """Make ``table``, partitioned by another key, partitioned by range of ``key`` (0012:
    ``receipt_grants`` from its own id to its receipt's): its legacy partition is detached and
    becomes the legacy partition of the new parent as ``partition_in_place`` makes one (its
    ``CHECK`` and primary key index from ``--prepare``, else made here); the rows of its other
    partitions (those made since it was partitioned) are kept in a temporary table, whose name
    is returned, for the caller to insert once the new months' partitions exist. The old parent
    and its other partitions are dropped."""
    legacy, moved = f"{table}_legacy", f"{table}_moved"
    # The legacy partition's indexes and keys take their parent's names back: partition_in_place
    # gives the new parent the names it finds.
    names = bind.execute(
        text(
            "SELECT 'INDEX', c.relname, p.relname FROM pg_index x"
            " JOIN pg_class c ON c.oid = x.indexrelid JOIN pg_inherits i ON i.inhrelid = c.oid"
            " JOIN pg_class p ON p.oid = i.inhparent WHERE x.indrelid = to_regclass(:legacy)"
            " AND NOT EXISTS (SELECT 1 FROM pg_constraint k WHERE k.conindid = c.oid)"
            " UNION ALL SELECT 'CONSTRAINT', c.conname, p.conname FROM pg_constraint c"
            " JOIN pg_constraint p ON p.oid = c.conparentid"
            " WHERE c.conrelid = to_regclass(:legacy)"
        ),
        {"legacy": legacy},
    ).all()
    bind.execute(text(f"ALTER TABLE {table} DETACH PARTITION {legacy}"))
    bind.execute(text(f"CREATE TEMP TABLE {moved} ON COMMIT DROP AS SELECT * FROM {table}"))  # noqa: S608
    bind.execute(text(f"DROP TABLE {table}"))
    bind.execute(text(f"ALTER TABLE {legacy} RENAME TO {table}"))
    for kind, name, parent in names:
        if name == parent:
            continue
        if kind == "INDEX":
            bind.execute(text(f"ALTER INDEX {name} RENAME TO {parent}"))
        else:
            bind.execute(text(f"ALTER TABLE {table} RENAME CONSTRAINT {name} TO {parent}"))
    partition_in_place(bind, table, key, bound, partitioned)
    return moved


def ensure_months_from(bind: Connection, bound: uuid.UUID, now: datetime, ahead: int) -> None:
    """After a table is partitioned with its legacy partition ending at ``bound``: a partition
    for every month ``receipts`` has one for beyond the bound, and for this month and the
    ``ahead`` after it."""
    months = {p.month for p in partitions(bind, "receipts") if p.month and p.low and p.low >= bound}
    months |= {Month.of(now) + count for count in range(ahead + 1)}
    for month in sorted(months):
        ensure_month_partitions(bind, month)
