"""Housekeeping the worker does every hour (``run_housekeeping``): on PostgreSQL the coming
months' partitions are made (``kuitti.partitions``), rows past their retention are deleted
(receipts by ``kuitti.retention``), and SQLite's planner statistics are refreshed.

Retention (docs/operations.md, "Retention"), each a setting in days:

- webhook deliveries, delivered or failed for good, with their attempts, once their last attempt
  is older than ``KUITTI_WEBHOOK_RETENTION_DAYS``;
- e-mails, sent or failed for good, once their last attempt fell due more than
  ``KUITTI_MAIL_RETENTION_DAYS`` ago;
- ``Idempotency-Key`` records older than ``KUITTI_IDEMPOTENCY_RETENTION_DAYS``: a key is replayed
  for that long, then it may be used again.

Pending rows are never deleted. Each kind goes in batches of ``RETENTION_BATCH`` rows, one
transaction each, so a post waits for one batch at most (SQLite has one writer). Each batch is
found through an index range: the outboxes' ``(status, next_attempt_at)`` index (a finished
row's ``next_attempt_at`` is when its last attempt was due or made), the idempotency records'
``created_at`` index (tests/test_housekeeping.py holds the plans).

SQLite keeps no statistics until ``ANALYZE`` runs, and its planner then guesses how selective
each index is: ``kuitti.dbmigrate.refresh_statistics`` runs it after every migration and here
every hour, as the tables grow. PostgreSQL's autovacuum keeps its own statistics.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta

from sqlalchemy import Select, delete, select, tuple_
from sqlalchemy.orm import Session

from kuitti.dbmigrate import refresh_statistics
from kuitti.logs import log
from kuitti.models import IdempotencyRecord, MailMessage, WebhookAttempt, WebhookDelivery
from kuitti.models.outbox import DeliveryStatus, MailStatus
from kuitti.partitions import ensure_partitions_ahead
from kuitti.retention import delete_expired_receipts, drop_expired_months
from kuitti.services import Services

HOUSEKEEPING_SECONDS = 3600.0
RETENTION_BATCH = 1000


def expired_deliveries(cutoff: datetime) -> Select[uuid.UUID]:
    """Finished webhook deliveries whose last attempt is older than ``cutoff``."""
    return (
        select(WebhookDelivery.id)
        .where(
            WebhookDelivery.status.in_([DeliveryStatus.DELIVERED, DeliveryStatus.FAILED]),
            WebhookDelivery.next_attempt_at < cutoff,
        )
        .limit(RETENTION_BATCH)
    )


def expired_mail(cutoff: datetime) -> Select[uuid.UUID]:
    """Finished e-mails whose last attempt fell due before ``cutoff``."""
    return (
        select(MailMessage.id)
        .where(
            MailMessage.status.in_([MailStatus.SENT, MailStatus.FAILED]),
            MailMessage.next_attempt_at < cutoff,
        )
        .limit(RETENTION_BATCH)
    )


def expired_idempotency_records(cutoff: datetime) -> Select[uuid.UUID, str]:
    """Idempotency records made before ``cutoff``, by their keys."""
    return (
        select(IdempotencyRecord.partner_id, IdempotencyRecord.key)
        .where(IdempotencyRecord.created_at < cutoff)
        .limit(RETENTION_BATCH)
    )


def delete_deliveries(session: Session, cutoff: datetime) -> int:
    ids = list(session.scalars(expired_deliveries(cutoff)))
    if ids:
        session.execute(delete(WebhookAttempt).where(WebhookAttempt.delivery_id.in_(ids)))
        session.execute(delete(WebhookDelivery).where(WebhookDelivery.id.in_(ids)))
    return len(ids)


def delete_mail(session: Session, cutoff: datetime) -> int:
    ids = list(session.scalars(expired_mail(cutoff)))
    if ids:
        session.execute(delete(MailMessage).where(MailMessage.id.in_(ids)))
    return len(ids)


def delete_idempotency_records(session: Session, cutoff: datetime) -> int:
    keys = [tuple(row) for row in session.execute(expired_idempotency_records(cutoff))]
    if keys:
        columns = tuple_(IdempotencyRecord.partner_id, IdempotencyRecord.key)
        session.execute(delete(IdempotencyRecord).where(columns.in_(keys)))
    return len(keys)


def delete_expired(services: Services) -> dict[str, int]:
    """Delete every row past its retention, a batch per transaction; how many of each kind.
    Receipts first (``kuitti.retention``): on PostgreSQL whole months, then the rest."""
    settings, now = services.settings, services.clock.now()
    kinds: dict[str, tuple[Callable[[Session, datetime], int], int]] = {
        "webhook_deliveries": (delete_deliveries, settings.webhook_retention_days),
        "mail_messages": (delete_mail, settings.mail_retention_days),
        "idempotency_records": (delete_idempotency_records, settings.idempotency_retention_days),
    }
    deleted = {
        "receipt_months": len(drop_expired_months(services)),
        "receipts": delete_expired_receipts(services),
    }
    for kind, (delete_batch, days) in kinds.items():
        cutoff = now - timedelta(days=days)
        deleted[kind] = 0
        while True:
            with services.db.session() as session:
                count = delete_batch(session, cutoff)
            deleted[kind] += count
            if count < RETENTION_BATCH:
                break
    return deleted


def make_partitions_ahead(services: Services) -> list[str]:
    """PostgreSQL: this month's partitions and those of ``KUITTI_MONTHS_AHEAD`` months after
    (``kuitti.partitions``); by the system clock, which the ids carry."""
    with services.db.session() as session:
        return ensure_partitions_ahead(session, datetime.now(UTC), services.settings.months_ahead)


async def run_housekeeping(services: Services, stop: asyncio.Event) -> None:
    """``delete_expired`` and ``refresh_statistics`` at start and then every
    ``HOUSEKEEPING_SECONDS`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            made = await asyncio.to_thread(make_partitions_ahead, services)
            if made:
                log.info("partitions made", partitions=made)
            deleted = await asyncio.to_thread(delete_expired, services)
            if any(deleted.values()):
                log.info("expired rows deleted", **deleted)
            await asyncio.to_thread(refresh_statistics, services.db)
        except Exception as exc:  # database trouble: the next round retries
            log.warning("housekeeping failed", error=f"{type(exc).__name__}: {exc}"[:300])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), HOUSEKEEPING_SECONDS)
