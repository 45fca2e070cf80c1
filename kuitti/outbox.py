"""The lease both outboxes share (webhook deliveries and e-mail).

A worker claims due rows with one statement (``take``): an ``UPDATE`` that sets
``lease_expires_at`` and a fresh ``lease_token`` on the rows a sub-select picks (``FOR UPDATE SKIP
LOCKED`` on PostgreSQL, so concurrent workers never pick the same row; SQLite serialises
writers), ``RETURNING`` what the worker needs. Nobody else takes the row until the lease
expires, so a worker that dies after claiming leaves it to whoever finds it then. The outcome is
written only while the token is still the claimer's (``held_by``): a worker that overran its
lease cannot undo the result of the one that took over.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any, TypeVar

from sqlalchemy import ColumnElement, Select, Update, and_, bindparam, or_, update
from sqlalchemy.sql.elements import BindParameter
from sqlalchemy.sql.selectable import GenerativeSelect

from kuitti.config import Settings
from kuitti.models.outbox import OutboxRow

JITTER_FRACTION = 0.10


@dataclass(frozen=True)
class Lease:
    token: str
    expires_at: datetime

    @property
    def values(self) -> dict[str, Any]:
        """The bound values of ``take``'s statement."""
        return {"lease_expires_at": self.expires_at, "lease_token": self.token}

    @classmethod
    def new(cls, now: datetime, seconds: float) -> Lease:
        return cls(secrets.token_hex(16), now + timedelta(seconds=seconds))


def due(model: type[OutboxRow], now: datetime | BindParameter[datetime]) -> ColumnElement[bool]:
    """Pending, due, and not leased by a live worker (at ``now``, a value or a bind parameter)."""
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


def take(model: type[OutboxRow], picked: Select[Any], dialect: str) -> Update:
    """The statement that leases the rows whose ids ``picked`` selects (it should keep only due
    rows), skipping rows another worker is claiming; run it with ``Lease.values``, and add
    ``.returning(…)`` to read the rows back in the same round trip. One statement instead of a
    locking ``SELECT`` and an ``UPDATE``."""
    # correlate(None): the sub-select reads the table itself, not the row being updated.
    locked = skip_locked(picked.correlate(None), dialect, model)
    return (
        update(model)
        .where(model.id.in_(locked.scalar_subquery()))
        .values(
            lease_expires_at=bindparam("lease_expires_at"), lease_token=bindparam("lease_token")
        )
    )


def held_by(model: type[OutboxRow], row_id: Any, token: Any) -> ColumnElement[bool]:
    """The row, while the lease is still ``token``'s (plain values or bind parameters)."""
    return and_(model.id == row_id, model.lease_token == token)


LEASE_COLUMNS = ("lease_expires_at", "lease_token")
RELEASED: dict[str, Any] = dict.fromkeys(LEASE_COLUMNS)
"""A row's values when its lease is given back: every lease column NULL."""


def retry_delay_seconds(settings: Settings, attempts_made: int, rng: random.Random) -> float:
    """The wait after the ``attempts_made``-th failed attempt: the schedule's delay ±10 %, so
    retries of many rows that failed together spread out."""
    base = settings.webhook_retry_schedule[attempts_made - 1]
    return base * (1 + rng.uniform(-JITTER_FRACTION, JITTER_FRACTION))


def gives_up(settings: Settings, attempts_made: int) -> bool:
    """True after the last attempt of the retry schedule."""
    return attempts_made > len(settings.webhook_retry_schedule)
