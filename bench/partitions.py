"""Partitions and retention on a filled database: what migration 0007 locks, what dropping a
month costs against deleting its receipts row by row, and how long a retention batch holds
SQLite's one writer.

    .venv/bin/python bench/partitions.py postgresql://kuitti:kuitti@127.0.0.1:5432/FILLED
    .venv/bin/python bench/partitions.py sqlite:////path/to/filled.db

FILLED is a database made by ``bench/fill.py`` (at revision 0006 for PostgreSQL: make it before
0007, or keep a copy). PostgreSQL: the bench works on copies (``CREATE DATABASE ... TEMPLATE``)
and drops them; nobody may be connected to FILLED meanwhile. It prints:

- migration 0007's time with its exclusive locks held (the whole transaction), without and
  with ``kuitti db partitions --prepare`` first, and the prepare step's own time (writes go on);
- while 0007 runs, the longest a one-row read of ``receipts`` waited (a probe every 10 ms);
- a month of N receipts (copied into a month's partitions with their grants, deliveries, card
  payments and links): the time to drop it (``kuitti.retention.drop_month``) against deleting
  the same number of receipts in retention batches;
SQLite: the time of one retention batch (``RECEIPT_BATCH`` receipts) and receipts per second.
"""

from __future__ import annotations

import argparse
import secrets
import statistics
import sys
import threading
import time
from datetime import UTC, date, datetime
from pathlib import Path

import psycopg
from sqlalchemy import select, text

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.models import Receipt
from kuitti.partitions import (
    ensure_month_partitions,
    month_floor,
    partitions,
    prepare_partitioning,
)
from kuitti.retention import RECEIPT_BATCH, delete_receipts, drop_month

MONTH = date(2027, 2, 1)


def copy_of(admin_url: str, template: str) -> str:
    name = f"kuitti_bench_{secrets.token_hex(3)}"
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return name


def drop(admin_url: str, name: str) -> None:
    with psycopg.connect(admin_url, autocommit=True) as admin:
        admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def migrate_with_probe(url: str) -> tuple[float, float]:
    """0007's time, and the longest a one-row read of receipts waited meanwhile."""
    db = Database(url, pool_size=2)
    done, waits = threading.Event(), []

    def probe() -> None:
        with psycopg.connect(url.replace("+psycopg", ""), autocommit=True) as connection:
            while not done.is_set():
                started = time.perf_counter()
                connection.execute("SELECT 1 FROM receipts LIMIT 1").fetchall()
                waits.append(time.perf_counter() - started)
                done.wait(0.01)

    prober = threading.Thread(target=probe)
    prober.start()
    started = time.perf_counter()
    upgrade(db)
    took = time.perf_counter() - started
    done.set()
    prober.join()
    db.dispose()
    return took, max(waits)


def fill_month(db: Database, receipts: int) -> None:
    """Copy ``receipts`` receipts of the legacy partition into ``MONTH`` with their grants,
    deliveries, card payments and links: the month's first millisecond, the ids' random bits."""
    prefix = f"{month_floor(MONTH).int >> 80:012x}"
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


def month_drop(db: Database) -> float:
    with db.engine.connect() as connection:
        [month] = [p for p in partitions(connection, "receipts") if p.month == MONTH]
    started = time.perf_counter()
    with db.session() as session:
        drop_month(session, month)
    return time.perf_counter() - started


def batch_deletes(db: Database, receipts: int) -> list[float]:
    """Delete ``receipts`` receipts in retention batches; each batch's time."""
    low, high = month_floor(MONTH), month_floor(date(MONTH.year, MONTH.month + 1, 1))
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

    plain = copy_of(admin, template)
    try:
        took, wait = migrate_with_probe(url(plain))
        print(f"0007 without prepare: {took:.2f} s with locks held; longest read wait {wait:.2f} s")
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
        took, wait = migrate_with_probe(url(prepared))
        print(f"0007 after prepare: {took:.2f} s with locks held; longest read wait {wait:.2f} s")
        db = Database(url(prepared), pool_size=2)
        count = args.month_receipts
        fill_month(db, count)
        dropped = month_drop(db)
        print(f"drop a month of {count:,} receipts (detach + drop): {dropped:.2f} s")
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
