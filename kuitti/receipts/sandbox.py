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
from sqlalchemy.orm import Session

from kuitti.models import Receipt
from kuitti.retention import delete_receipts
from kuitti.services import Services

PURGE_BATCH = 500
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
    session: Session, *, now: datetime, retention_days: int, limit: int = PURGE_BATCH
) -> int:
    """Delete up to ``limit`` sandbox receipts created before the retention window; how many."""
    cutoff = now - timedelta(days=retention_days)
    ids = list(session.scalars(expired_sandbox_receipts(cutoff, limit)))
    if not ids:
        return 0
    delete_receipts(session, ids)
    return len(ids)


def purge_sandbox_receipts(services: Services) -> int:
    """Delete every sandbox receipt past its retention, one batch per transaction."""
    deleted = 0
    while True:
        with services.db.session() as session:
            count = purge_batch(
                session,
                now=services.clock.now(),
                retention_days=services.settings.sandbox_retention_days,
            )
        deleted += count
        if count < PURGE_BATCH:
            return deleted
