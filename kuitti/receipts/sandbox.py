"""Deleting sandbox receipts once ``KUITTI_SANDBOX_RETENTION_DAYS`` have passed
(docs/sandbox.md): the worker does it every hour, ``kuitti receipts purge-sandbox`` at once.

A sandbox receipt is deleted with everything that hangs on it: its links, grants, card-linking
rows and e-mails; a return that named it as its original no longer does. A test card's purchase
it had matched is freed (the test card stays).
Production receipts are never touched: every statement is bounded by the ids of sandbox
receipts, found through an index that holds only them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta

from sqlalchemy import Select, select, text

from kuitti.db import Database
from kuitti.models import Receipt
from kuitti.retention import delete_receipt_batch
from kuitti.services import Services

# Receipts deleted per transaction (docs/scale.md, "At two million receipts").
# SQLite: with its pages read first, a batch of 100 holds the one writer for about 30 ms of
# CPU (54-116 ms at a load average of 15, where the same batches not read ahead held it
# 438-650 ms). PostgreSQL: a batch takes row locks only, and each of its statements is planned
# over the monthly partitions at the same cost for 100 receipts as for 500 (batches of 100
# deleted a tenth fewer a second).
PURGE_BATCH = {"sqlite": 100, "postgresql": 500}
# The partial index's own predicate (``ix_receipts_sandbox_created``: ``WHERE sandbox``). Each
# database uses such an index only for a WHERE it sees implies the predicate, and neither sees
# it in what SQLAlchemy writes for a boolean (``sandbox IS true`` on PostgreSQL, ``sandbox = 1``
# on SQLite): both then read every receipt, 1.8 s a batch at two million stored.
_SANDBOX_ONLY = text("receipts.sandbox")


def expired_sandbox_receipts(cutoff: datetime, limit: int) -> Select[uuid.UUID]:
    """The oldest ``limit`` sandbox receipts created before ``cutoff``: a range of the index
    that holds only sandbox receipts."""
    return (
        select(Receipt.id)
        .where(_SANDBOX_ONLY, Receipt.created_at < cutoff)
        .order_by(Receipt.created_at)
        .limit(limit)
    )


def purge_batch(
    db: Database, *, now: datetime, retention_days: int, limit: int | None = None
) -> tuple[int, int]:
    """Delete up to ``limit`` (``PURGE_BATCH``) sandbox receipts created before the retention
    window, in one transaction (``kuitti.retention.delete_receipt_batch``); how many were found
    and how many deleted."""
    limit = limit or PURGE_BATCH[db.dialect]
    cutoff = now - timedelta(days=retention_days)
    with db.session(write=False) as session:
        ids = list(session.scalars(expired_sandbox_receipts(cutoff, limit)))
    return len(ids), (delete_receipt_batch(db, ids) if ids else 0)


def purge_sandbox_receipts(services: Services) -> int:
    """Delete every sandbox receipt past its retention, one batch per transaction."""
    deleted = 0
    while True:
        found, count = purge_batch(
            services.db,
            now=services.clock.now(),
            retention_days=services.settings.sandbox_retention_days,
        )
        deleted += count
        if found < PURGE_BATCH[services.db.dialect]:
            return deleted
