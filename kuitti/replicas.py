"""A read replica (``KUITTI_READ_DATABASE_URL``): which reads a streaming standby answers, and
when the primary answers instead (docs/replication.md, "Read replicas").

The rule, in one place:

- **Rights are decided on the primary.** Whether a key is held by an enabled partner, whether a
  token, a consent (connection) or a card still gives the right: the statement that decides it
  runs on the primary, so a right ended there is refused at once whatever the replica's lag.
- **The replica loads and renders.** The stored receipt a read renders, a list page's rows and
  the receipt of a link page come from the replica. A read whose receipt the replica does not
  hold yet, or holds in an older version than the one the primary decided on (its ETag differs),
  is answered from the primary: a read right after its post is always found.
- **A list** comes from the replica while its lag is at most ``LIST_MAX_LAG_SECONDS``, its rows
  checked again on the primary (a right ended since is left out); beyond that bound, from the
  primary.
- **The replica away**: reads go to the primary, and the replica is tried again after
  ``AWAY_SECONDS``. A replica outage never fails a read.
- **The primary away**: the rights are decided on the replica, but only while it has applied all
  the WAL it received. A synchronous standby has received (flushed) every acknowledged commit, so
  then it holds every right the primary ever ended; otherwise the read answers 503.
"""

from __future__ import annotations

import math
import time
from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from sqlalchemy import Select, literal_column, select
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

from kuitti.db import Database
from kuitti.errors import DatabaseUnavailable
from kuitti.metrics import REPLICA_LAG, REPLICA_READS, REPLICA_UP

T = TypeVar("T")

AWAY_SECONDS = 5.0
"""After a replica failed a read, how long reads go straight to the primary."""
PRIMARY_AWAY_SECONDS = 5.0
"""After the primary failed to decide a right, how long the replica decides (if it may)
before the primary is tried again: each try waits for the primary's pool (``db.py``)."""
LIST_MAX_LAG_SECONDS = 1.0
"""A list page is read from the replica while it lags by at most this; else from the primary."""
LAG_MEMO_SECONDS = 0.5
"""How long a measured lag is used before the replica is asked again."""
REPLICA_WAIT_SECONDS = 2.0
"""How long a replica read waits for a pooled connection before the primary answers."""

# Seconds behind the primary: 0 while everything received is applied (an idle primary sends
# nothing, so the replay time alone would grow), else the age of the last applied commit; and
# whether everything received is applied. A server not in recovery (promoted) is caught up.
_STATE: Select[*tuple[Any, ...]] = select(
    literal_column(
        "CASE WHEN NOT pg_is_in_recovery() "
        "OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn() THEN 0.0 "
        "ELSE COALESCE(EXTRACT(EPOCH FROM now() - pg_last_xact_replay_timestamp())::float8, "
        "'Infinity'::float8) END"
    ),
    literal_column(
        "COALESCE(NOT pg_is_in_recovery() "
        "OR pg_last_wal_receive_lsn() = pg_last_wal_replay_lsn(), false)"
    ),
)


# A standby cancels a query whose rows the WAL it replays removes (a conflict with recovery):
# serialization_failure, or deadlock_detected for a buffer pin. The read is not wrong, only
# too late there: the primary answers it.
_RECOVERY_CONFLICTS = ("40001", "40P01")


def recovery_conflict(error: DBAPIError) -> bool:
    """Whether a replica's ``error`` is a query cancelled by a conflict with recovery."""
    return getattr(error.orig, "sqlstate", None) in _RECOVERY_CONFLICTS


class ReadReplica:
    """The replica's ``Database`` and what this process knows of it and of the primary."""

    def __init__(self, url: str, *, pool_size: int, prepared_statements: bool = True) -> None:
        self.db = Database(
            url,
            pool_size=pool_size,
            async_read_wait=REPLICA_WAIT_SECONDS,
            prepared_statements=prepared_statements,
        )
        self._away_until = 0.0
        self._primary_away_until = 0.0
        self._lag_at = -math.inf
        self._lag = math.inf
        REPLICA_UP.set(1)

    @property
    def label(self) -> str:
        return self.db.label

    @property
    def available(self) -> bool:
        """Not known to be away: a read may try it."""
        return time.monotonic() >= self._away_until

    def went_away(self) -> None:
        """A read found the replica away: the primary answers for ``AWAY_SECONDS``."""
        self._away_until = time.monotonic() + AWAY_SECONDS
        self._lag_at, self._lag = time.monotonic(), math.inf
        REPLICA_UP.set(0)
        REPLICA_LAG.set(math.nan)

    def _measured(self, rows: list[tuple[Any, ...]]) -> tuple[float, bool]:
        lag, applied = float(rows[0][0]), bool(rows[0][1])
        self._lag_at, self._lag = time.monotonic(), lag
        REPLICA_UP.set(1)
        REPLICA_LAG.set(lag)
        return lag, applied

    async def state(self) -> tuple[float, bool]:
        """Its lag in seconds and whether it has applied everything it received, asked now."""
        try:
            return self._measured(await self.db.read_rows_async(_STATE, {}))
        except DatabaseUnavailable:
            self.went_away()
            raise

    def refresh(self) -> None:
        """Measure the lag now, for ``/metrics`` and ``/readyz`` (from a thread); a failure is
        recorded as the replica away, not raised: it must not fail either endpoint."""
        try:
            self._measured(self.db.read_rows(_STATE, {}))
        except (DatabaseUnavailable, DBAPIError):
            self.went_away()

    async def lag(self) -> float:
        """Its lag in seconds, measured at most ``LAG_MEMO_SECONDS`` ago; infinite when away."""
        if not self.available:
            return math.inf
        if time.monotonic() - self._lag_at > LAG_MEMO_SECONDS:
            try:
                await self.state()
            except DatabaseUnavailable:
                return math.inf
        return self._lag

    @property
    def primary_away(self) -> bool:
        """The primary failed to decide a right less than ``PRIMARY_AWAY_SECONDS`` ago."""
        return time.monotonic() < self._primary_away_until

    def primary_went_away(self) -> None:
        self._primary_away_until = time.monotonic() + PRIMARY_AWAY_SECONDS

    async def decided(
        self, primary: Database, decide: Callable[[Database], Awaitable[T]]
    ) -> tuple[T, Database]:
        """``decide`` (a read that decides rights) on the primary, and the database it ran on.
        While the primary is away, on the replica if it has applied all the WAL it received
        (see the module's docstring); else ``DatabaseUnavailable``."""
        if not self.primary_away:
            try:
                return await decide(primary), primary
            except DatabaseUnavailable:
                self.primary_went_away()
        _lag, applied = await self.state()
        if not applied:
            raise DatabaseUnavailable()
        REPLICA_READS.labels("primary_away").inc()
        try:
            return await decide(self.db), self.db
        except DBAPIError as error:
            if recovery_conflict(error):
                raise DatabaseUnavailable() from error  # try again: 503 with Retry-After
            raise

    def read(self, read: Callable[[Session], T | None]) -> T | None:
        """``read`` in a session on the replica (from a thread), or None: when it finds
        nothing (None), or the replica is away. The caller then reads from the primary."""
        if not self.available:
            REPLICA_READS.labels("away").inc()
            return None
        try:
            with self.db.session(write=False) as session:
                found = read(session)
        except DatabaseUnavailable:
            self.went_away()
            REPLICA_READS.labels("away").inc()
            return None
        except DBAPIError as error:
            if not recovery_conflict(error):
                raise
            REPLICA_READS.labels("miss").inc()
            return None
        REPLICA_READS.labels("replica" if found is not None else "miss").inc()
        return found

    async def open(self) -> None:
        await self.db.open_async_reads()

    async def close(self) -> None:
        await self.db.close_async_reads()

    def dispose(self) -> None:
        self.db.dispose()
