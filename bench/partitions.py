"""Partitions and retention on a filled database: what migrations 0007, 0009 and 0012 lock,
what dropping a month costs (statement by statement, and the checks of its detach) against
deleting its receipts row by row, and how long a retention batch holds SQLite's one writer.

    .venv/bin/python bench/partitions.py postgresql://kuitti:kuitti@127.0.0.1:5432/FILLED
    .venv/bin/python bench/partitions.py postgresql://.../FILLED --drop-only --no-batches
    .venv/bin/python bench/partitions.py sqlite:////path/to/filled.db

FILLED is a database made by ``bench/fill.py``, at any revision from 0006 on (a copy kept before
0007 measures every migration; the migrations after its revision are the ones run).
PostgreSQL: the bench works on copies (``CREATE DATABASE ... TEMPLATE``) and drops them; nobody
may be connected to FILLED meanwhile. It prints:

- the time each of migrations 0007 (receipts, grants, deliveries), 0009 (card payments) and
  0012 (grants by their receipt) holds its exclusive locks (each its own transaction), without
  (not with ``--drop-only``) and with ``kuitti db partitions --prepare`` first, and the prepare
  step's own time (writes go on);
- while each runs, the longest a one-row read of ``receipts`` (0007), ``card_payments`` (0009)
  or ``receipt_grants`` (0012) waited (a probe every 10 ms);
- a month of N receipts (copied into a month's partitions with their grants, deliveries, card
  payments and links from the legacy partition): the join PostgreSQL runs for each foreign key
  declared on ``receipts`` when the month is detached, with the planner's join and as an index
  nested loop (wall and the backend's CPU); the time to drop the month
  (``kuitti.retention.drop_month``), statement by statement, and the backend's CPU; against
  deleting the same number of receipts in retention batches (not with ``--no-batches``);
SQLite: the time of one retention batch (``RECEIPT_BATCH`` receipts) and receipts per second.
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path

import psycopg
from alembic import command
from sqlalchemy import Connection, select, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.migrate_alembic import alembic_config
from kuitti.models import Receipt
from kuitti.months import Month
from kuitti.partitioning import prepare_partitioning
from kuitti.partitions import ensure_month_partitions, partitions
from kuitti.retention import RECEIPT_BATCH, delete_receipts, drop_month

MONTH = Month(2027, 2)


def copy_of(admin_url: str, template: str) -> str:
    name = f"kuitti_bench_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return name


def drop(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_with_probe(url: str, revision: str, probed: str) -> tuple[float, float]:
    """The time of the upgrade to ``revision`` (one transaction, its locks held throughout),
    and the longest a one-row read of ``probed`` waited meanwhile."""
    db = Database(url, pool_size=2)
    done, waits = threading.Event(), []

    def probe() -> None:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as connection:
            while not done.is_set():
                started = time.perf_counter()
                connection.execute(f"SELECT 1 FROM {probed} LIMIT 1").fetchall()  # noqa: S608
                waits.append(time.perf_counter() - started)
                done.wait(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    started = time.perf_counter()
    config = alembic_config(db.url)
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    took = time.perf_counter() - started
    done.set()
    prober.join()
    db.dispose()
    return took, max(waits)


# Each migration after the template's revision, in turn, and the table a probe reads while it
# runs (None: no figure, nothing heavy).
REVISIONS = (
    ("0007", "receipts"),
    ("0008", None),
    ("0009", "card_payments"),
    ("0010", None),
    ("0011", None),
    ("0012", "receipt_grants"),
)


def revision_of(url: str) -> str:
    with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as connection:
        row = connection.execute("SELECT version_num FROM alembic_version").fetchone()
    assert row is not None
    return str(row[0])


def migrations(url: str, label: str) -> None:
    """Each migration after the database's revision, those that lock a filled table timed with
    their probe."""
    current = revision_of(url)
    for revision, probed in REVISIONS:
        if revision <= current:
            continue
        if probed is None:
            upgrade_to(url, revision)
            continue
        took, wait = migrate_with_probe(url, revision, probed)
        print(
            f"{revision} {label}: {took:.2f} s with locks held;"
            f" longest read wait of {probed} {wait:.2f} s"
        )
    db = Database(url, pool_size=1)
    upgrade(db)
    db.dispose()


def upgrade_to(url: str, revision: str) -> None:
    db = Database(url, pool_size=1)
    config = alembic_config(db.url)
    with db.engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)
    db.dispose()


def fill_month(db: Database, receipts: int) -> None:
    """Copy ``receipts`` receipts of the legacy partition into ``MONTH`` with their grants,
    deliveries, card payments and links: the month's first millisecond, the ids' random bits."""
    prefix = f"{MONTH.first_id.int >> 80:012x}"
    new_id = f"('{prefix}' || substr(replace({{0}}::text, '-', ''), 13))::uuid"
    with db.engine.begin() as connection:
        ensure_month_partitions(connection, MONTH)
        connection.execute(
            text(
                "CREATE TEMP TABLE chosen ON COMMIT DROP AS"  # noqa: S608
                f" SELECT id FROM receipts_legacy LIMIT {int(receipts)}"
            )
        )
        connection.execute(
            text(
                f"INSERT INTO receipts SELECT {new_id.format('r.id')}, partner_id, document,"  # noqa: S608
                " document_hash, receipt_number, receipt_time, receipt_timestamp, merchant_name,"
                " total, currency, token_statuses, created_at, NULL, return_count, sandbox"
                " FROM receipts r JOIN chosen USING (id)"
            )
        )
        connection.execute(
            text(
                f"INSERT INTO receipt_grants SELECT {new_id.format('g.id')}, partner_id,"  # noqa: S608
                f" {new_id.format('g.receipt_id')}, receipt_time, reason, connection_id, card_id,"
                " card_user_id FROM receipt_grants g JOIN chosen c ON c.id = g.receipt_id"
            )
        )
        connection.execute(
            text(
                f"INSERT INTO receipt_deliveries SELECT user_id, {new_id.format('d.receipt_id')},"  # noqa: S608
                " receipt_time, via, created_at"
                " FROM receipt_deliveries d JOIN chosen c ON c.id = d.receipt_id"
            )
        )
        connection.execute(
            text(
                "INSERT INTO card_payments (id, receipt_id, payment_index, status, merchant_id,"  # noqa: S608
                " amount, pre_authorized_amount, currency, paid_at, masked_pan, pan_last4,"
                " authorization_code, reference_number, settle_at, reason, sandbox, created_at,"
                f" updated_at) SELECT gen_random_uuid(), {new_id.format('p.receipt_id')},"
                " payment_index, status, merchant_id, amount, pre_authorized_amount, currency,"
                " paid_at, masked_pan, pan_last4, authorization_code, reference_number,"
                " settle_at, reason, sandbox, created_at, updated_at"
                " FROM card_payments p JOIN chosen c ON c.id = p.receipt_id"
            )
        )
        connection.execute(
            text(
                "INSERT INTO receipt_links SELECT namespace, identifier || '-m',"  # noqa: S608
                f" {new_id.format('l.receipt_id')}, shareable"
                " FROM receipt_links l JOIN chosen c ON c.id = l.receipt_id"
            )
        )
    with db.engine.connect() as connection:
        connection.execute(text("ANALYZE"))
        connection.commit()


def backend_cpu(connection: Connection) -> float:
    """CPU seconds the PostgreSQL backend serving ``connection`` has used (its process on
    this machine, ``/proc``): the figure a loaded machine does not inflate as it does wall
    time."""
    pid = connection.execute(text("SELECT pg_backend_pid()")).scalar_one()
    fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def referring_checks(db: Database) -> None:
    """The check PostgreSQL runs, when a month of ``receipts`` is detached, for each foreign
    key declared on the parent (``RI_PartitionRemove_Check``'s join of the referring table with
    the month's partition, under its ``work_mem``): its plan's join and time, as the planner
    chooses and with hash and merge joins off (an index nested loop from the month's rows)."""
    name = f"receipts_p{MONTH.year:04d}{MONTH.month:02d}"
    with db.engine.connect() as connection:
        found = connection.execute(
            text(
                "SELECT conrelid::regclass::text, a.attname FROM pg_constraint c"
                " JOIN pg_attribute a ON a.attrelid = c.conrelid AND a.attnum = c.conkey[1]"
                " WHERE c.contype = 'f' AND c.confrelid = 'receipts'::regclass"
                " AND c.conparentid = 0"
            )
        )
        keys = [(str(table), str(column)) for table, column in found]
        # And the check of the grants' key as it was declared before migration 0012, for the
        # comparison (grants then referred to the parent: its detach joined them all).
        keys.append(("receipt_grants", "receipt_id"))
        connection.execute(text("SET work_mem = '64MB'"))  # maintenance_work_mem's default
        connection.execute(text("SET max_parallel_workers_per_gather = 0"))  # as SPI plans it
        connection.commit()
        for table, column in keys:
            rows = connection.execute(
                text("SELECT reltuples::bigint FROM pg_class WHERE oid = to_regclass(:t)"),
                {"t": table},
            ).scalar_one()
            connection.commit()
            query = (
                f"SELECT fk.{column} FROM {table} fk JOIN {name} pk ON pk.id = fk.{column}"  # noqa: S608
                f" WHERE fk.{column} IS NOT NULL"
            )
            figures = []
            for forced in (False, True):
                with connection.begin():
                    if forced:
                        connection.execute(text("SET LOCAL enable_hashjoin = off"))
                        connection.execute(text("SET LOCAL enable_mergejoin = off"))
                    cpu = backend_cpu(connection)
                    plan = connection.execute(
                        text(f"EXPLAIN (ANALYZE, FORMAT JSON) {query}")
                    ).scalar_one()
                    cpu = backend_cpu(connection) - cpu
                top = plan[0]["Plan"]
                figures.append(
                    f"{top['Node Type']} {top['Actual Total Time'] / 1000:.3f} s (CPU {cpu:.2f} s)"
                )
            print(f"  check of {table}.{column} (~{rows:,} rows): {'; forced: '.join(figures)}")


def month_drop(db: Database) -> tuple[float, list[tuple[str, float]]]:
    with db.engine.connect() as connection:
        [month] = [p for p in partitions(connection, "receipts") if p.month == MONTH]
    started = time.perf_counter()
    with db.session() as session:
        cpu = backend_cpu(session.connection())
        steps = drop_month(session, month)
        steps.append(("the backend's CPU, all steps", backend_cpu(session.connection()) - cpu))
    return time.perf_counter() - started, steps


def batch_deletes(db: Database, receipts: int) -> list[float]:
    """Delete ``receipts`` receipts in retention batches; each batch's time."""
    low, high = MONTH.first_id, MONTH.next.first_id
    times = []
    for _ in range(receipts // RECEIPT_BATCH):
        started = time.perf_counter()
        with db.session() as session:
            query = select(Receipt.id).where(Receipt.id >= low, Receipt.id < high)
            ids = list(session.scalars(query.limit(RECEIPT_BATCH)))
            delete_receipts(session, ids)
        times.append(time.perf_counter() - started)
    return times


def sqlite_batches(url: str, batches: int) -> tuple[list[float], list[float]]:
    """Retention batches on SQLite: each one's wall time (the writer lock held, from the
    transaction's start to its commit) and its CPU time (SQLite runs in this process: the
    figure a loaded machine does not inflate)."""
    db = Database(url.replace("sqlite://", "sqlite+pysqlite://", 1), pool_size=1)
    upgrade(db)
    walls, cpus = [], []
    for _ in range(batches):
        wall, cpu = time.perf_counter(), time.process_time()
        with db.session() as session:
            ids = list(
                session.scalars(select(Receipt.id).order_by(Receipt.id).limit(RECEIPT_BATCH))
            )
            delete_receipts(session, ids)
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    db.dispose()
    return walls, cpus


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("url")
    parser.add_argument("--month-receipts", type=int, default=100_000)
    parser.add_argument(
        "--no-batches", action="store_true", help="skip deleting the month in retention batches"
    )
    parser.add_argument(
        "--drop-only", action="store_true", help="one copy: prepare, migrate, drop a month"
    )
    args = parser.parse_args()
    if args.url.startswith("sqlite"):
        walls, cpus = sqlite_batches(args.url, 20)
        median, cpu = statistics.median(walls), statistics.median(cpus)
        print(
            f"SQLite retention batch of {RECEIPT_BATCH}: median {median * 1000:.0f} ms"
            f" (CPU {cpu * 1000:.1f} ms), max {max(walls) * 1000:.0f} ms;"
            f" {RECEIPT_BATCH / cpu:,.0f} receipts per CPU second"
        )
        return
    base, _, template = args.url.rpartition("/")
    admin = f"{base}/postgres"

    def url(name: str) -> str:
        return f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)

    if not args.drop_only:
        plain = copy_of(admin, template)
        try:
            migrations(url(plain), "without prepare")
        finally:
            drop(admin, plain)
    prepared = copy_of(admin, template)
    try:
        db = Database(url(prepared), pool_size=2)
        started = time.perf_counter()
        prepare_partitioning(db.engine, datetime.now(UTC))
        print(
            f"kuitti db partitions --prepare: {time.perf_counter() - started:.2f} s (writes go on)"
        )
        db.dispose()
        migrations(url(prepared), "after prepare")
        db = Database(url(prepared), pool_size=2)
        count = args.month_receipts
        fill_month(db, count)
        with db.engine.connect() as connection:
            others = connection.execute(
                text("SELECT count(*) FROM receipts WHERE id < :low"), {"low": MONTH.first_id}
            ).scalar_one()
        print(f"a month of {count:,} receipts beside {others:,} others; the checks of a detach:")
        referring_checks(db)
        dropped, steps = month_drop(db)
        print(
            f"drop a month of {count:,} receipts (detach + drop): {dropped:.2f} s"
            f" (load average {os.getloadavg()[0]:.1f})"
        )
        for what, seconds in steps:
            print(f"  {what}: {seconds:.3f} s")
        if args.no_batches:
            return
        fill_month(db, count)
        times = batch_deletes(db, count)
        total = sum(times)
        print(
            f"delete the same {count:,} in batches of {RECEIPT_BATCH}: {total:.1f} s"
            f" ({count / total:,.0f} receipts/s,"
            f" median batch {statistics.median(times) * 1000:.0f} ms);"
            f" drop ÷ batches = {dropped / total:.3f}"
        )
        db.dispose()
    finally:
        drop(admin, prepared)


if __name__ == "__main__":
    main()
