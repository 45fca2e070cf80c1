"""Waking background steps as soon as the work they wait for is committed.

A transaction that queues work (a webhook, a card payment to match) *announces* it on a
channel. When that transaction commits, every step of this process watching the channel wakes
at once; on PostgreSQL a ``NOTIFY`` sent inside the same transaction (so delivered only on
commit) wakes the steps of every other process too. A rolled-back transaction wakes nobody.
Steps still poll on a timer: a wake-up is a shortcut, never the only way work is found (SQLite
has no NOTIFY between processes, and a LISTEN connection can drop).
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Callable

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from sqlalchemy import event
from sqlalchemy.orm import Session

from kuitti.db import Database, database_of
from kuitti.logs import log

LISTEN_RETRY_SECONDS = 1.0
LISTEN_KEEPALIVES = {
    "keepalives": "1",
    "keepalives_idle": "10",
    "keepalives_interval": "5",
    "keepalives_count": "3",
}
"""TCP keepalives of a ``LISTEN`` connection, unless its URL sets them: it only reads, so
without them one whose server vanished without closing it (a machine lost, a network cut
before a failover) would wait for ever instead of reconnecting to the new primary; with
them it gives up within about 25 s."""


class CommitWakeup:
    """One channel of wake-ups: announced in a transaction, delivered after its commit."""

    def __init__(self, channel: str) -> None:
        self.channel = channel
        self._announced = f"kuitti.wakeup.{channel}"
        self._callbacks: set[Callable[[], None]] = set()
        self._lock = threading.Lock()
        _CHANNELS.append(self)

    def announce(self, session: Session) -> None:
        """Mark the session's transaction as one that queued work on this channel."""
        if session.info.get(self._announced):
            return
        session.info[self._announced] = True
        db = database_of(session)
        if not db.is_sqlite:
            db.run_in(session, f"NOTIFY {self.channel}")

    def subscribe(self, callback: Callable[[], None]) -> Callable[[], None]:
        """Call ``callback`` (from any thread) after each commit that announced work here;
        returns the function that unsubscribes."""
        with self._lock:
            self._callbacks.add(callback)

        def unsubscribe() -> None:
            with self._lock:
                self._callbacks.discard(callback)

        return unsubscribe

    def wake(self) -> None:
        """Wake this process's watchers now (after moving a test clock, say)."""
        with self._lock:
            callbacks = list(self._callbacks)
        for callback in callbacks:
            callback()

    @contextlib.asynccontextmanager
    async def watching(self, db: Database) -> AsyncIterator[asyncio.Event]:
        """An event set on every wake-up of this channel, from this process or (PostgreSQL)
        any other, for as long as the block runs."""
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def wake_from_any_thread() -> None:
            with contextlib.suppress(RuntimeError):  # the loop has closed
                loop.call_soon_threadsafe(wake.set)

        unsubscribe = self.subscribe(wake_from_any_thread)
        listener = (
            asyncio.create_task(self._listen(db, wake)) if db.dialect == "postgresql" else None
        )
        try:
            yield wake
        finally:
            unsubscribe()
            if listener is not None:
                listener.cancel()
                await asyncio.gather(listener, return_exceptions=True)

    async def _listen(self, db: Database, wake: asyncio.Event) -> None:
        """Set ``wake`` on every ``NOTIFY``; reconnect when the database returns."""
        given = conninfo_to_dict(db.listen_conninfo)
        dsn = make_conninfo(
            db.listen_conninfo,
            **{name: value for name, value in LISTEN_KEEPALIVES.items() if name not in given},
        )
        while True:
            try:
                async with await psycopg.AsyncConnection.connect(dsn, autocommit=True) as conn:
                    await conn.execute(f"LISTEN {self.channel}")
                    wake.set()  # catch up with anything announced while nobody listened
                    async for _ in conn.notifies():
                        wake.set()
            except (psycopg.Error, OSError) as exc:
                log.info("LISTEN connection lost", channel=self.channel, error=str(exc)[:200])
                await asyncio.sleep(LISTEN_RETRY_SECONDS)


_CHANNELS: list[CommitWakeup] = []


@event.listens_for(Session, "after_commit")
def _wake_after_commit(session: Session) -> None:
    for channel in _CHANNELS:
        if session.info.pop(channel._announced, False):
            channel.wake()


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    for channel in _CHANNELS:
        session.info.pop(channel._announced, None)
