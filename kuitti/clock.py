"""The clock, behind a small interface so tests move time instead of sleeping."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware, in UTC."""
        ...


class SystemClock:
    def now(self) -> datetime:
        return datetime.now(UTC)


class FrozenClock:
    """A clock that stands still until told to move (tests, benchmarks)."""

    def __init__(self, start: datetime | None = None) -> None:
        self._now = start or datetime(2026, 1, 15, 12, 0, tzinfo=UTC)

    def now(self) -> datetime:
        return self._now

    def advance(self, seconds: float) -> None:
        self._now += timedelta(seconds=seconds)

    def set(self, moment: datetime) -> None:
        self._now = moment


def as_utc(moment: datetime) -> datetime:
    """Datetimes read back from SQLite are naive; every stored time is UTC."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment.astimezone(UTC)


def iso_utc(moment: datetime) -> str:
    """ISO 8601 in UTC with a ``Z`` (``2026-01-15T12:00:00Z``): how kuitti writes a moment in
    JSON. The one exception is the webhook delivery log, whose documented form is ``+00:00``."""
    return as_utc(moment).isoformat().replace("+00:00", "Z")
