"""The lease both outboxes share (webhook deliveries and e-mail).

A worker claims due rows in one short transaction: it selects them (``FOR UPDATE SKIP LOCKED``
on PostgreSQL, so concurrent workers never pick the same row; SQLite serialises writers) and
sets ``lease_expires_at`` and a fresh ``lease_token``. Nobody else takes the row until the lease
expires, so a worker that dies after claiming leaves it to whoever finds it then. The outcome is
written only while the token is still the claimer's (``held_by``): a worker that overran its
lease cannot undo the result of the one that took over.
"""

from __future__ import annotations

import random
import secrets
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, and_, or_, update
from sqlalchemy.orm import Session
from sqlalchemy.sql.selectable import GenerativeSelect

from kuitti.config import Settings
from kuitti.models.outbox import OutboxRow

JITTER_FRACTION = 0.10


@dataclass(frozen=True)
class Lease:
    token: str
    expires_at: datetime

    @classmethod
    def new(cls, now: datetime, seconds: float) -> Lease:
        return cls(secrets.token_hex(16), now + timedelta(seconds=seconds))


def due(model: type[OutboxRow], now: datetime) -> ColumnElement[bool]:
    """Pending, due, and not leased by a live worker."""
    return and_(
        model.status == model.PENDING,
        model.next_attempt_at <= now,
        or_(model.lease_expires_at.is_(None), model.lease_expires_at <= now),
    )


Q = TypeVar("Q", bound=GenerativeSelect)


def skip_locked(query: Q, dialect: str, model: type[OutboxRow]) -> Q:
    """Lock the selected rows of ``model``, skipping rows another worker is claiming
    (PostgreSQL; SQLite's write lock already serialises claims)."""
    if dialect == "postgresql":
        return query.with_for_update(skip_locked=True, of=model)
    return query


def take(session: Session, model: type[OutboxRow], ids: Sequence[uuid.UUID], lease: Lease) -> None:
    """Lease the rows (selected with ``skip_locked`` in the same transaction)."""
    session.execute(
        update(model)
        .where(model.id.in_(ids))
        .values(lease_expires_at=lease.expires_at, lease_token=lease.token)
    )


def held_by(model: type[OutboxRow], row_id: Any, token: Any) -> ColumnElement[bool]:
    """The row, while the lease is still ``token``'s (plain values or bind parameters)."""
    return and_(model.id == row_id, model.lease_token == token)


RELEASED: dict[str, Any] = {"lease_expires_at": None, "lease_token": None}


def retry_delay_seconds(settings: Settings, attempts_made: int, rng: random.Random) -> float:
    """The wait after the ``attempts_made``-th failed attempt: the schedule's delay ±10 %, so
    retries of many rows that failed together spread out."""
    base = settings.webhook_retry_schedule[attempts_made - 1]
    return base * (1 + rng.uniform(-JITTER_FRACTION, JITTER_FRACTION))


def gives_up(settings: Settings, attempts_made: int) -> bool:
    """True after the last attempt of the retry schedule."""
    return attempts_made > len(settings.webhook_retry_schedule)
