"""Engine, the unit of work, and the declarative base.

One unit of work per request and per job: ``Database.session()`` commits when the block ends and
rolls back on any exception. Services never commit.

SQLite needs care to be a good embedded default: WAL so readers never wait for the writer,
``synchronous=NORMAL`` (durable across a process crash; only a power loss can lose the newest
commits), and write transactions that start with ``BEGIN IMMEDIATE`` behind an in-process lock, so
concurrent writers queue instead of failing with ``database is locked`` halfway through.

Receipt ingest, the busiest write, goes through ``GroupCommit`` instead: one writer thread per
process takes every write unit that is waiting, runs each in its own savepoint and commits them
together, so a burst of receipts costs one transaction (one WAL flush) rather than one each.
A unit's caller gets its answer only after that commit.
"""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Generic, TypeVar

from sqlalchemy import DateTime, Engine, MetaData, create_engine, event
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.types import TypeDecorator

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        return value.replace(tzinfo=None) if dialect.name == "sqlite" else value

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime()}  # noqa: RUF012


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute("PRAGMA busy_timeout=10000")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        connection.exec_driver_sql(f"BEGIN {mode}")


class Database:
    """The engine of one database and the sessions made from it."""

    def __init__(self, url: str, *, pool_size: int = 20, echo: bool = False) -> None:
        self.url = url
        self.is_sqlite = url.startswith("sqlite")
        if self.is_sqlite:
            path = url.removeprefix("sqlite:///")
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
            self.engine = create_engine(
                url,
                echo=echo,
                hide_parameters=True,  # database errors are logged; bound values may be secret
                pool_size=pool_size,
                max_overflow=pool_size,
                connect_args={"check_same_thread": False, "timeout": 10},
            )
            _configure_sqlite(self.engine)
            write_engine: Engine = self.engine.execution_options(sqlite_begin="IMMEDIATE")
        else:
            self.engine = create_engine(
                url,
                echo=echo,
                hide_parameters=True,  # database errors are logged; bound values may be secret
                pool_size=pool_size,
                max_overflow=pool_size // 2,
                pool_pre_ping=True,
            )
            write_engine = self.engine
        self._read_sessions = sessionmaker(self.engine, expire_on_commit=False)
        self._write_sessions = sessionmaker(write_engine, expire_on_commit=False)
        self._sqlite_write_lock = threading.Lock()
        self.group_commit = GroupCommit(self)

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def label(self) -> str:
        """The URL as it may be printed or logged: without its password."""
        return self.engine.url.render_as_string(hide_password=True)

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """One unit of work: commit at the end of the block, roll back on error."""
        lock = self._sqlite_write_lock if self.is_sqlite and write else nullcontext()
        factory = self._write_sessions if write else self._read_sessions
        with lock, factory() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise

    def dispose(self) -> None:
        self.group_commit.stop()
        self.engine.dispose()


T = TypeVar("T")


@dataclass
class _Unit(Generic[T]):
    work: Callable[[Session], T]
    loop: asyncio.AbstractEventLoop
    future: asyncio.Future[T]

    def settle(self, outcome: T | BaseException) -> None:
        self.loop.call_soon_threadsafe(self._set, outcome)

    def _set(self, outcome: T | BaseException) -> None:
        if self.future.done():  # the request went away meanwhile
            return
        if isinstance(outcome, BaseException):
            self.future.set_exception(outcome)
        else:
            self.future.set_result(outcome)


class GroupCommit:
    """One writer thread that commits every waiting write unit in one transaction.

    Each unit runs in its own savepoint, so a unit that raises rolls back alone and its caller
    gets the exception; the others commit. If a unit fails on a database error (a deadlock
    between two processes' batches, say) or the commit itself fails, the batch's units are
    run again one transaction each, so no unit fails because of another. Callers are answered
    only after their transaction has committed.
    """

    MAX_BATCH = 64

    def __init__(self, db: Database) -> None:
        self._db = db
        self._queue: queue.SimpleQueue[_Unit[Any] | None] = queue.SimpleQueue()
        self._thread: threading.Thread | None = None
        self._start_lock = threading.Lock()

    async def run(self, work: Callable[[Session], T]) -> T:
        """Run ``work(session)`` in the next group transaction; its result once committed."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[T] = loop.create_future()
        unit = _Unit(work, loop, future)
        self._ensure_started()
        self._queue.put(unit)
        return await future

    def stop(self) -> None:
        with self._start_lock:
            if self._thread is not None:
                self._queue.put(None)
                self._thread.join()
                self._thread = None

    def _ensure_started(self) -> None:
        if self._thread is not None:
            return
        with self._start_lock:
            if self._thread is None:
                self._thread = threading.Thread(
                    target=self._write_forever, name="kuitti-group-commit", daemon=True
                )
                self._thread.start()

    def _write_forever(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                return
            batch: list[_Unit[Any]] = [first]
            stopping = False
            while len(batch) < self.MAX_BATCH:
                try:
                    unit = self._queue.get_nowait()
                except queue.Empty:
                    break
                if unit is None:
                    stopping = True
                    break
                batch.append(unit)
            self._commit(batch)
            if stopping:
                return

    def _commit(self, batch: list[_Unit[Any]]) -> None:
        outcomes: list[Any] = []
        try:
            with self._db.session(write=True) as session:
                for unit in batch:
                    try:
                        with session.begin_nested():
                            outcomes.append(unit.work(session))
                    except Exception as exc:  # the unit's own failure, rolled back alone
                        if isinstance(exc, DBAPIError) and len(batch) > 1:
                            raise
                        outcomes.append(exc)
        except Exception as exc:
            if len(batch) == 1:
                batch[0].settle(exc)
            else:
                for unit in batch:
                    self._commit([unit])
            return
        for unit, outcome in zip(batch, outcomes, strict=True):
            unit.settle(outcome)
