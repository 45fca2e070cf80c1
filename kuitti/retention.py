"""Receipt retention (docs/operations.md, "Retention"): a receipt is kept at least its
retention after its receipt time, then deleted with everything that refers to it.

A partner's retention is its own ``retention_days`` where the law or its contract differs, else
``KUITTI_RECEIPT_RETENTION_DAYS``; unset, receipts are kept. Sandbox receipts have their own
purge (``kuitti.receipts.sandbox``).

Two ways, both run by the worker's hourly housekeeping:

- ``drop_expired_months`` (PostgreSQL): a month whose every receipt is past its partner's
  retention is removed by detaching and dropping its partitions, after deleting the few rows
  of unpartitioned tables that refer to its receipts;
- ``delete_expired_receipts`` (both): the rest, in batches of ``RECEIPT_BATCH`` receipts, one
  transaction each, found per partner through the grants' listing index (partner, receipt
  time): receipts of partners with a shorter retention in a month kept for a longer one,
  back-dated receipts, the rows from before partitioning, and every receipt on SQLite.
"""

from __future__ import annotations

import json
import time
import uuid
from datetime import datetime, timedelta

from sqlalchemy import Executable, Select, delete, select, text, update
from sqlalchemy.orm import Session

from kuitti.config import Settings
from kuitti.db import Database
from kuitti.models import (
    CardMatch,
    CardMatchingQueue,
    CardPaymentRecord,
    CardPurchase,
    MailMessage,
    Partner,
    Receipt,
    ReceiptClaim,
    ReceiptDelivery,
    ReceiptGrant,
    ReceiptLink,
)
from kuitti.models.receipts import GrantReason
from kuitti.partitions import (
    PARTITIONED,
    Partition,
    is_partition_of,
    is_partitioned,
    partition_name,
    partitions,
)
from kuitti.readahead import KEYS, Rows, read_ahead
from kuitti.services import Services

# Receipts deleted per transaction: one batch holds SQLite's one writer for well under 100 ms
# (docs/scale.md, "Partitions and retention").
RECEIPT_BATCH = 50
# SQLite's page cache for a batch's transaction, in KiB: a batch of 200 receipts touched about
# 2,000 pages, and in a connection's usual 2 MB it read many twice and wrote changed ones to the
# WAL before its commit (a fifth of its CPU). The connection's own size comes back after.
BATCH_CACHE_KIB = 16384


def retention_days(partner: Partner, settings: Settings) -> int | None:
    """Days ``partner``'s receipts are kept after their receipt time; None: kept."""
    if partner.sandbox:
        return settings.sandbox_retention_days
    if partner.retention_days is not None:
        return partner.retention_days
    return settings.receipt_retention_days


# The rows that refer to a receipt, deleted before it; and those that refer to one of its card
# payments (a purchase is freed, a queued payment goes).
_REFERRING = (
    CardMatch.receipt_id,
    CardPaymentRecord.receipt_id,
    ReceiptLink.receipt_id,
    ReceiptClaim.receipt_id,
    ReceiptGrant.receipt_id,
    ReceiptDelivery.receipt_id,
    MailMessage.receipt_id,
)
_REFERRING_TO_PAYMENTS = (CardPurchase.payment_id, CardMatchingQueue.payment_id)


def delete_receipts(session: Session, ids: list[uuid.UUID]) -> int:
    """Delete the receipts ``ids`` and every row that refers to one: returns that named one as
    their original no longer do, and a card purchase it had matched is freed. How many
    receipts were deleted."""
    # The partial index's own predicate, spelled out: SQLite uses ix_receipts_original only
    # for a WHERE it sees implies it, and reads every receipt otherwise (100 ms a batch).
    returns = Receipt.original_receipt_id.is_not(None) & Receipt.original_receipt_id.in_(ids)
    session.execute(update(Receipt).where(returns).values(original_receipt_id=None))
    payments = select(CardPaymentRecord.id).where(CardPaymentRecord.receipt_id.in_(ids))
    session.execute(
        update(CardPurchase).where(CardPurchase.payment_id.in_(payments)).values(payment_id=None)
    )
    session.execute(delete(CardMatchingQueue).where(CardMatchingQueue.payment_id.in_(payments)))
    for column in _REFERRING:
        session.execute(delete(column.table).where(column.in_(ids)))
    deleted = session.execute(delete(Receipt).where(Receipt.id.in_(ids)))
    return int(getattr(deleted, "rowcount", 0) or 0)


def rows_of_receipts() -> list[Rows]:
    """What ``delete_receipts`` writes, for ``kuitti.readahead``: the receipts, the returns
    that name one, and the rows that refer to one or to one of its card payments."""
    payments = CardPaymentRecord.__tablename__
    of_payments = f"(SELECT id FROM {payments} WHERE receipt_id IN {KEYS})"  # noqa: S608
    return [
        Rows(Receipt.__tablename__, f"d.id IN {KEYS}"),
        Rows(Receipt.__tablename__, f"d.original_receipt_id IN {KEYS}"),
        *(Rows(column.table.name, f"d.{column.name} IN {KEYS}") for column in _REFERRING),
        *(Rows(column.table.name, f"d.{column.name} IN {of_payments}")
          for column in _REFERRING_TO_PAYMENTS),
    ]  # fmt: skip


def read_ahead_receipts(db: Database, ids: list[uuid.UUID]) -> None:
    """SQLite: read every page ``delete_receipts`` will touch for ``ids`` before it runs
    (``kuitti.readahead``), so that its transaction holds the one write lock for the deletes
    alone, not for reads from disk."""
    as_stored = Receipt.__table__.c.id.type.bind_processor(db.engine.dialect)
    read_ahead(db, rows_of_receipts(), [as_stored(i) for i in ids] if as_stored else ids)


def delete_receipt_batch(db: Database, ids: list[uuid.UUID]) -> int:
    """Delete the receipts ``ids`` in one transaction, their pages read first
    (``read_ahead_receipts``); how many were deleted."""
    read_ahead_receipts(db, ids)
    with db.session() as session:
        if not db.is_sqlite:
            return delete_receipts(session, ids)
        connection = session.connection()
        kept = int(connection.exec_driver_sql("PRAGMA cache_size").scalar_one())
        connection.exec_driver_sql(f"PRAGMA cache_size = -{BATCH_CACHE_KIB}")
        deleted = delete_receipts(session, ids)
        connection.exec_driver_sql(f"PRAGMA cache_size = {kept}")
        return deleted


def expired_receipts(partner_id: uuid.UUID, cutoff: datetime, limit: int) -> Select[uuid.UUID]:
    """Up to ``limit`` receipts ``partner_id`` posted whose receipt time is before ``cutoff``:
    a range of the grants' listing index (partner, receipt time)."""
    return (
        select(ReceiptGrant.receipt_id)
        .where(
            ReceiptGrant.partner_id == partner_id,
            ReceiptGrant.receipt_time < cutoff,
            ReceiptGrant.reason == GrantReason.POSTED,
        )
        .order_by(ReceiptGrant.receipt_time)
        .limit(limit)
    )


def delete_expired_receipts(services: Services, limit: int = RECEIPT_BATCH) -> int:
    """Delete every production receipt past its partner's retention, ``limit`` per
    transaction; how many."""
    now, deleted = services.clock.now(), 0
    with services.db.session(write=False) as session:
        partners = list(session.scalars(select(Partner).where(Partner.sandbox.is_(False))))
        kept = [(p.id, retention_days(p, services.settings)) for p in partners]
    for partner_id, days in kept:
        if days is None:
            continue
        cutoff = now - timedelta(days=days)
        while True:
            with services.db.session(write=False) as session:
                found = session.scalars(expired_receipts(partner_id, cutoff, limit))
                ids = list(dict.fromkeys(found))
            if ids:
                deleted += delete_receipt_batch(services.db, ids)
            if len(ids) < limit:
                break
    return deleted


def newest_receipt_times(session: Session, month: Partition) -> dict[str, str]:
    """A past month's newest receipt time per partner (ISO text by partner id).

    Read once, by one pass over the month, and kept as the partition's comment: a month that
    has ended takes no more rows, and deletions only lower a maximum, so the figures stay a safe
    bound while a longer retention holds the month for years, and the hourly round reads the
    month no more."""
    noted = session.execute(
        text("SELECT obj_description(to_regclass(:name), 'pg_class')"), {"name": month.name}
    ).scalar()
    if noted:
        return dict(json.loads(noted))
    newest = {
        str(partner_id): receipt_time.isoformat()
        for partner_id, receipt_time in session.execute(
            text(f"SELECT partner_id, max(receipt_time) FROM {month.name} GROUP BY partner_id")  # noqa: S608
        )
    }
    comment = json.dumps(newest).replace("'", "''")
    session.execute(text(f"COMMENT ON TABLE {month.name} IS '{comment}'"))
    return newest


def month_is_expired(session: Session, month: Partition, now: datetime, settings: Settings) -> bool:
    """Whether every receipt in ``month`` (a past partition of ``receipts``) is past its
    partner's retention."""
    days = {
        str(partner.id): retention_days(partner, settings)
        for partner in session.scalars(select(Partner))
    }
    for partner_id, receipt_time in newest_receipt_times(session, month).items():
        kept = days.get(partner_id)
        if kept is None or datetime.fromisoformat(receipt_time) >= now - timedelta(days=kept):
            return False
    # Grants made later for the month's receipts are in its partitions too (migration 0012).
    return True


def _timed(
    steps: list[tuple[str, float]], what: str, statement: Executable | str, session: Session
) -> None:
    started = time.perf_counter()
    session.execute(text(statement) if isinstance(statement, str) else statement)
    steps.append((what, time.perf_counter() - started))


def probe_referring_rows(session: Session) -> None:
    """For the rest of the transaction, make the checks of a detach index nested loops.

    Detaching a partition of ``receipts`` checks each foreign key declared on the parent
    (``receipt_links``, ``mail_messages``, the default and legacy partitions') by one join of
    the referring table with the partition, planned with the session's settings; the planner's
    hash join reads the whole referring table, which grows with every month kept. Without hash
    and merge joins it is an index nested loop from the smaller side: each of the partition's
    rows probes the referring column's index (every foreign key has one, tests/
    test_foreign_key_indexes.py), or the few referring rows probe the partition's key, whatever
    the other months hold. The check itself is PostgreSQL's, under the detach's locks."""
    session.execute(text("SET LOCAL enable_hashjoin = off"))
    session.execute(text("SET LOCAL enable_mergejoin = off"))


def drop_month(session: Session, month: Partition) -> list[tuple[str, float]]:
    """Remove an ingest month's receipts by detaching and dropping its partitions; each step
    and its seconds. Rows elsewhere that refer to them go first, each through an index range on
    the month's ids. A table with no partition of the month (``card_payments`` from before
    migration 0009, a month whose rows went to a default partition) has the month's rows
    deleted instead, before its referred table's partition is detached."""
    low, high = month.low, month.high
    assert low is not None
    assert high is not None
    assert month.month is not None
    steps: list[tuple[str, float]] = []
    session.execute(text("SET LOCAL lock_timeout = '10s'"))
    _timed(
        steps,
        "returns forget their original",
        update(Receipt)
        .where(Receipt.original_receipt_id >= low, Receipt.original_receipt_id < high)
        .values(original_receipt_id=None),
        session,
    )
    payments = select(CardPaymentRecord.id).where(
        CardPaymentRecord.receipt_id >= low, CardPaymentRecord.receipt_id < high
    )
    _timed(
        steps,
        "card_purchases freed",
        update(CardPurchase).where(CardPurchase.payment_id.in_(payments)).values(payment_id=None),
        session,
    )
    _timed(
        steps,
        "card_matching_queue",
        delete(CardMatchingQueue).where(CardMatchingQueue.payment_id.in_(payments)),
        session,
    )
    for column in (
        CardMatch.receipt_id,
        ReceiptLink.receipt_id,
        ReceiptClaim.receipt_id,
        MailMessage.receipt_id,
    ):
        _timed(
            steps,
            column.table.name,
            delete(column.table).where(column >= low, column < high),
            session,
        )
    probe_referring_rows(session)
    for table, key in PARTITIONED.items():
        name = partition_name(table, month.month)
        if is_partition_of(session, name, table):
            _timed(steps, f"detach {name}", f"ALTER TABLE {table} DETACH PARTITION {name}", session)
            _timed(steps, f"drop {name}", f"DROP TABLE {name}", session)
        else:
            where = f"{key} >= '{low}' AND {key} < '{high}'"
            _timed(steps, f"delete from {table}", f"DELETE FROM {table} WHERE {where}", session)  # noqa: S608
    return steps


def _past(partition: Partition, now: datetime) -> bool:
    """Whether ``partition``'s id range ends before ``now``: it takes no more rows."""
    assert partition.high is not None
    return bool(partition.high.int >> 80 <= now.timestamp() * 1000)


def drop_legacy_if_empty(session: Session) -> bool:
    """Drop the partitions of the rows from before partitioning (migration 0007) once
    retention has emptied them; whether they were dropped."""
    for table in PARTITIONED:
        if session.execute(text(f"SELECT 1 FROM {table}_legacy LIMIT 1")).first() is not None:  # noqa: S608
            return False
    session.execute(text("SET LOCAL lock_timeout = '10s'"))
    probe_referring_rows(session)
    for table in PARTITIONED:
        session.execute(text(f"ALTER TABLE {table} DETACH PARTITION {table}_legacy"))
        session.execute(text(f"DROP TABLE {table}_legacy"))
    return True


def drop_expired_months(services: Services) -> list[str]:
    """PostgreSQL: drop every month whose receipts are all past retention; the months
    dropped. Only months before the current one, whose partitions take no more rows."""
    dropped: list[str] = []
    with services.db.session(write=False) as session:
        if not is_partitioned(session):
            return dropped
        months_all = partitions(session, "receipts")
    months = [p for p in months_all if p.month is not None]
    now = services.clock.now()  # the system clock in service, which the ids carry too
    for legacy in months_all:
        # Once its range is past: until then it takes this month's rows.
        if legacy.name == "receipts_legacy" and _past(legacy, now):
            with services.db.session() as session:
                if drop_legacy_if_empty(session):
                    dropped.append("legacy")
    for month in months:
        assert month.month is not None
        assert month.high is not None
        if not _past(month, now):
            break
        with services.db.session() as session:
            if month_is_expired(session, month, now, services.settings):
                drop_month(session, month)
                dropped.append(str(month.month))
    return dropped
