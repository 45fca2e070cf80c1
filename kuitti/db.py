"""Engine, the unit of work, and the declarative base.

One unit of work per request and per job: ``Database.session()`` commits when the block ends and
rolls back on any exception. Services never commit.

SQLite needs care to be a good embedded default: WAL so readers never wait for the writer,
``synchronous=NORMAL`` (durable across a process crash; only a power loss can lose the newest
commits), and write transactions that start with ``BEGIN IMMEDIATE`` behind an in-process lock, so
concurrent writers queue instead of failing with ``database is locked`` halfway through. While a
process serves, a thread copies the WAL into the database file after writes, so that commits do
not wait for it (``Database.checkpointing``, ``kuitti.checkpoints``).

Why one long module: the sessions and the driver-level paths of the hottest statements (the
reads, the reads and statements inside a session, the writer's inserts) share one cache of
compiled statements and one conversion of driver errors to SQLAlchemy's; apart, each would
reach into the others' privates.
"""

from __future__ import annotations

import asyncio
import functools
import re
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, ParamSpec, TypeVar

import anyio.to_thread
import psycopg
import zstandard
from psycopg import AsyncConnection
from psycopg_pool import AsyncConnectionPool, PoolTimeout
from sqlalchemy import (
    BindParameter,
    ColumnElement,
    DateTime,
    Engine,
    MetaData,
    Select,
    String,
    Table,
    Text,
    and_,
    bindparam,
    cast,
    create_engine,
    event,
    insert,
    null,
    update,
)
from sqlalchemy.dialects import sqlite
from sqlalchemy.engine import Dialect
from sqlalchemy.exc import DBAPIError, DisconnectionError, StatementError
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.orm import DeclarativeBase, Session, sessionmaker
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement
from sqlalchemy.types import TypeDecorator, TypeEngine

from kuitti.checkpoints import WAL_AUTOCHECKPOINT_PAGES, BackgroundCheckpoints
from kuitti.config import libpq_conninfo
from kuitti.errors import DatabaseUnavailable, ServiceBusy

P = ParamSpec("P")
T = TypeVar("T")
Read = tuple[Select[*tuple[Any, ...]], Mapping[str, Any]]
"""A prebuilt ``SELECT`` and its parameters (``Database.session_rows_together``)."""
_DEFERRED = "kuitti.deferred_statements"
"""``session.info``'s statements that ``Database.run_in`` left to send with the next ones."""

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_N_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class _SQLiteStoredText(sqlite.DATETIME):
    """SQLAlchemy's SQLite ``DATETIME``, bound as the text ``UTCDateTime`` has written already."""

    def bind_processor(self, dialect: Dialect) -> None:
        return None

    def literal_processor(self, dialect: Dialect) -> Callable[[str], str]:
        return lambda text: f"'{text}'"  # digits, "-", ":", "." and a space: nothing to escape


# What isoformat writes after the time of an aware datetime: "+00:00" for UTC.
_UTC_OFFSET_LENGTH = len("+00:00")


class UTCDateTime(TypeDecorator[datetime]):
    """A timezone-aware UTC datetime on every backend (SQLite stores it naive)."""

    impl = DateTime(timezone=True)
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        if dialect.name == "sqlite":
            return _SQLiteStoredText()  # type: ignore[no-untyped-call]  # an untyped __init__
        return self.impl_instance

    def process_bind_param(self, value: datetime | None, dialect: Dialect) -> datetime | str | None:
        if value is None:
            return None
        if value.tzinfo is None:
            raise ValueError("naive datetime given to a UTC column")
        value = value.astimezone(UTC)
        if dialect.name != "sqlite":
            return value
        # SQLAlchemy's SQLite text for the naive UTC time ("2026-01-15 08:00:00.000000"), written
        # by isoformat in a third of the time of its % formatting: a receipt binds seven of these.
        return value.isoformat(" ", "microseconds")[:-_UTC_OFFSET_LENGTH]

    def process_result_value(self, value: datetime | None, dialect: Dialect) -> datetime | None:
        if value is None:
            return None
        return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


class _TextFromUTF8(Text):
    """SQLite's text bound as UTF-8 bytes: ``CAST`` takes them as text, as they are."""

    def bind_expression(self, bindvalue: BindParameter[Any]) -> ColumnElement[Any]:
        return cast(bindvalue, Text)


class UTF8Text(TypeDecorator[str]):
    """Text that may be given as UTF-8 bytes (what orjson writes), so the driver does not encode
    a decoded copy of them again.

    Read back, it is text. On SQLite the bytes go in as they are: for a 16 KB receipt document
    the encoding would cost the writer 10 µs, a hundredth of a stored receipt. psycopg binds
    only text as text, so PostgreSQL is given it decoded."""

    impl = Text
    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return _TextFromUTF8() if dialect.name == "sqlite" else self.impl_instance

    def process_bind_param(self, value: str | bytes | None, dialect: Dialect) -> str | bytes | None:
        if isinstance(value, bytes) and dialect.name != "sqlite":
            return value.decode()
        return value


ZSTD_FRAME = b"\x28\xb5\x2f\xfd"
"""The first bytes of a zstd frame; a JSON text never starts with them."""
_zstd = threading.local()  # a compressor and a decompressor per thread: they are not shared


def compressed_document(value: str | bytes) -> bytes:
    """A receipt document as SQLite stores it: zstd at level 1 (``bench/storage.py
    --codecs``: level 3 made documents no smaller), or the UTF-8 bytes as they are where that
    would be no shorter."""
    raw = value.encode() if isinstance(value, str) else value
    compressor = getattr(_zstd, "compressor", None)
    if compressor is None:
        compressor = _zstd.compressor = zstandard.ZstdCompressor(level=1)
    packed: bytes = compressor.compress(raw)
    return packed if len(packed) < len(raw) else raw


def stored_document(value: str | bytes) -> str:
    """The document's text from what SQLite holds: a zstd frame, UTF-8 bytes, or (a document
    stored before compression) text."""
    if isinstance(value, str):
        return value
    if value.startswith(ZSTD_FRAME):
        decompressor = getattr(_zstd, "decompressor", None)
        if decompressor is None:
            decompressor = _zstd.decompressor = zstandard.ZstdDecompressor()
        value = decompressor.decompress(value)
    return value.decode()


class _CompressedText(Text):
    """SQLite's receipt document: bound as a BLOB (``compressed_document``), read back as text."""

    def bind_processor(self, dialect: Dialect) -> Callable[[Any], Any]:
        def process(value: str | bytes | None) -> bytes | None:
            return None if value is None else compressed_document(value)

        return process

    def result_processor(self, dialect: Dialect, coltype: object) -> Callable[[Any], Any]:
        def process(value: str | bytes | None) -> str | None:
            return None if value is None else stored_document(value)

        return process


class DocumentText(UTF8Text):
    """A receipt document: ``UTF8Text``, compressed with zstd on SQLite, which stores text as
    it is. A 60-row document of 16.3 KB takes one 4 KB page instead of five, a 4-row one of
    2.3 KB a quarter of a page instead of a whole one, for 11-23 µs more CPU to write it and
    4-10 µs to read it (docs/storage.md). PostgreSQL compresses it itself (TOAST, LZ4:
    migration 0010); there the column is ``UTF8Text``'s."""

    cache_ok = True

    def load_dialect_impl(self, dialect: Dialect) -> TypeEngine[Any]:
        return _CompressedText() if dialect.name == "sqlite" else self.impl_instance


class uuid_text(FunctionElement[str]):
    """A ``Uuid`` column as the text ``str(uuid)`` writes, made by the database: a page of
    rows that only shows its ids skips a ``UUID`` object for each (built by the driver or
    SQLAlchemy, then written back out: a tenth of a list page's CPU)."""

    type = String()
    inherit_cache = True


@compiles(uuid_text)
def _uuid_text(element: uuid_text, compiler: SQLCompiler, **kw: Any) -> str:
    return f"CAST({compiler.process(element.clauses, **kw)} AS TEXT)"  # PostgreSQL's uuid


@compiles(uuid_text, "sqlite")
def _uuid_text_sqlite(element: uuid_text, compiler: SQLCompiler, **kw: Any) -> str:
    # SQLAlchemy stores a Uuid on SQLite as its 32 hexadecimal digits, in lower case.
    digits = compiler.process(element.clauses, **kw)
    parts = ((1, 8), (9, 4), (13, 4), (17, 4), (21, 12))
    return " || '-' || ".join(f"substr({digits}, {start}, {length})" for start, length in parts)


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)
    type_annotation_map = {datetime: UTCDateTime()}  # noqa: RUF012


def table(model: type[Base]) -> Table:
    """The table of a mapped class, for Core statements (multi-row inserts without the ORM)."""
    return Base.metadata.tables[model.__tablename__]


_DATABASE = "kuitti.database"


def database_of(session: Session) -> Database:
    """The ``Database`` whose ``session()`` opened ``session``."""
    database: Database = session.info[_DATABASE]
    return database


SQLITE_BUSY_TIMEOUT_MS = 10_000
"""How long an SQLite statement, or a write transaction's start, waits for a lock."""
WRITE_LOCK_POLL_SECONDS = 0.0005


def _configure_sqlite(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Let SQLAlchemy, not the driver, decide when transactions begin.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        cursor.execute("PRAGMA journal_mode=WAL")
        cursor.execute("PRAGMA synchronous=NORMAL")
        cursor.execute("PRAGMA foreign_keys=ON")
        cursor.execute(f"PRAGMA busy_timeout={SQLITE_BUSY_TIMEOUT_MS}")
        cursor.execute(f"PRAGMA wal_autocheckpoint={WAL_AUTOCHECKPOINT_PAGES}")
        cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        mode = connection.get_execution_options().get("sqlite_begin", "DEFERRED")
        if mode == "IMMEDIATE":
            _begin_immediate(connection.connection.dbapi_connection)
        else:
            connection.exec_driver_sql(f"BEGIN {mode}")


def _begin_immediate(dbapi_connection: sqlite3.Connection) -> None:
    """``BEGIN IMMEDIATE``, trying again every half millisecond while another connection holds
    the write lock, for at most the connection's busy timeout.

    SQLite's own wait (its busy handler) sleeps 1, 2, 5, 10, 15… ms between tries, so a writer
    that finds the lock taken oversleeps the moment it is let go; with two processes storing
    receipts, that wait would set the tail of the posts' latency."""
    (timeout_ms,) = dbapi_connection.execute("PRAGMA busy_timeout").fetchone()
    dbapi_connection.execute("PRAGMA busy_timeout=0")
    try:
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            try:
                dbapi_connection.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                busy = exc.sqlite_errorcode & 0xFF == sqlite3.SQLITE_BUSY  # or an extended kind
                if not busy or time.monotonic() > deadline:
                    raise
            time.sleep(WRITE_LOCK_POLL_SECONDS)
    finally:
        dbapi_connection.execute(f"PRAGMA busy_timeout={timeout_ms}")


# Connections of each process's async pool for the hottest reads (PostgreSQL): a read is one
# short statement, so a few connections keep the event loop busy; more would only queue at the
# server (``Database.read_rows_async``).
ASYNC_READ_CONNECTIONS = 4
# How long a read waits for one of them before it fails: a database that cannot be reached
# fails the request (503, ``DatabaseUnavailable``) instead of holding it for the pool's default
# 30 s, and /readyz says why; a burst queues for milliseconds, far below this.
ASYNC_READ_WAIT_SECONDS = 5.0


class ReadLine:
    """The reads waiting for a connection of the process's async pools: a queue inside the
    process, which ``kuitti.edge`` adds to the wait of each request it takes up, so that one
    target bounds both (``kuitti.admission``)."""

    def __init__(self) -> None:
        self.waiting = 0
        self.last_wait = 0.0  # seconds the read that last left the line waited in it

    def ahead(self) -> float:
        """The wait of the read that last left the line while others still wait: CoDel's
        sojourn time, as the wait a request taken up now will meet; none when no read waits."""
        return self.last_wait if self.waiting else 0.0


READ_LINE = ReadLine()
"""The process's one line: its event loop's reads all wait in it."""

READ_BY: ContextVar[float | None] = ContextVar("read_by", default=None)
"""The event loop's time by which the current request's reads must have a connection, set by
``kuitti.edge`` for a request taken up under a standing queue (its arrival plus the target): a
read still waiting then is refused (``ServiceBusy``), as it would have been had it waited in
the kernel. None: a read waits the busy wait."""
SHORTEST_READ_WAIT = 0.0005
"""The least a read past its ``READ_BY`` waits for a connection: psycopg's pool refuses a wait
of zero even when a connection is free."""

# A pooled PostgreSQL connection idle for longer than this is tested before it is handed out.
PING_AFTER_IDLE_SECONDS = 1.0


def _ping_when_idle(engine: Engine, after_seconds: float) -> None:
    """Test a connection on checkout only if it sat idle in the pool: ``pool_pre_ping`` tests
    every checkout, a round trip that cost a receipt read about a third of its wall time
    (docs/performance.md, "Reading"). A connection broken while the pool was busy fails its
    statement instead; SQLAlchemy then drops the pool's connections, as it does for any
    disconnect."""

    @event.listens_for(engine.pool, "checkin")
    def _checked_in(_dbapi_connection: Any, record: Any) -> None:
        record.info["idle_since"] = time.monotonic()

    @event.listens_for(engine.pool, "checkout")
    def _checked_out(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        idle_since = record.info.get("idle_since")
        if idle_since is None or time.monotonic() - idle_since < after_seconds:
            return
        try:
            engine.dialect.do_ping(dbapi_connection)
        except engine.dialect.loaded_dbapi.Error as exc:
            # The pool replaces the connection and tries again.
            raise DisconnectionError() from exc


_PASSWORD_IN_URL = re.compile(r"^([a-z+]+://[^:@/?]*):[^@/?]*@")


def without_password(url: str) -> str:
    """``url`` as it may be printed or logged: its password, if any, replaced by ``***``."""
    return _PASSWORD_IN_URL.sub(r"\1:***@", url)


# SQLSTATEs of a database that is away or cannot take writes now: class 08 (the connection
# failed), 57P (the server is shutting down, crashed, or is starting), 53 (out of connections,
# memory or disk), and 25006 (a write in a read-only transaction: a standby, or
# ``default_transaction_read_only``).
_UNAVAILABLE_STATES = ("08", "57P", "53", "25006")


def is_unavailable(error: BaseException) -> bool:
    """Whether ``error`` says the database is away or read-only, rather than that a statement
    was wrong: a psycopg error with one of the SQLSTATEs above, one with no SQLSTATE at all
    (the connection was refused or lost), or no pooled connection to be had in time."""
    if isinstance(error, DBAPIError):
        if error.connection_invalidated:
            return True
        return error.orig is not None and is_unavailable(error.orig)
    if isinstance(error, PoolTimeout):
        return True
    if not isinstance(error, psycopg.Error):
        return False
    state = error.sqlstate
    if state is None:
        return isinstance(error, psycopg.OperationalError)
    return state.startswith(_UNAVAILABLE_STATES)


@contextmanager
def unavailable_as_503() -> Iterator[None]:
    """Raise ``DatabaseUnavailable`` (503 with ``Retry-After``) for an error of a database that
    is away or read-only (``is_unavailable``), from the driver's error; any other error as it
    is."""
    try:
        yield
    except (DBAPIError, psycopg.Error, PoolTimeout) as error:
        if is_unavailable(error):
            raise DatabaseUnavailable() from error
        raise


def _connect_by_libpq(engine: Engine, conninfo: str) -> None:
    """Connect with ``conninfo`` as libpq reads it: SQLAlchemy is told only the dialect, and
    its own connect (with the type adapters it registers) gets the conninfo as it is."""

    @event.listens_for(engine, "do_connect")
    def _connect(_dialect: Any, _record: Any, cargs: list[Any], _cparams: Any) -> None:
        cargs[:] = [conninfo]


class Database:
    """The engine of one database and the sessions made from it."""

    def __init__(
        self,
        url: str,
        *,
        pool_size: int = 20,
        echo: bool = False,
        ping_after_idle: float = PING_AFTER_IDLE_SECONDS,
        async_read_wait: float = ASYNC_READ_WAIT_SECONDS,
        listen_url: str | None = None,
        prepared_statements: bool = True,
        busy_wait: float | None = None,
    ) -> None:
        """``listen_url``: where ``LISTEN`` connects (PostgreSQL), when ``url`` goes through
        a pooler in transaction mode that cannot keep a session's ``LISTEN``.
        ``prepared_statements``: false behind a pooler in transaction mode that does not keep
        server-side prepared statements (PgBouncer before 1.21): psycopg then prepares
        none. ``busy_wait``: the longest a read from the event loop waits for a connection
        that every other read holds before it is refused (``ServiceBusy``); None: as long
        as ``async_read_wait``."""
        self.url = url
        self.async_read_wait = async_read_wait
        self.busy_wait = busy_wait
        self.is_sqlite = url.startswith("sqlite")
        self.sqlite_file: str | None = None
        """The file of an SQLite database kept in one."""
        self.checkpoints: BackgroundCheckpoints | None = None
        """The thread copying the WAL while ``checkpointing()`` runs."""
        self.conninfo = self.listen_conninfo = ""
        """libpq's connection URIs (PostgreSQL): of the database, and of its ``LISTEN``."""
        self._connect_args: dict[str, Any] = {}
        """What psycopg's ``connect`` is given (PostgreSQL)."""
        if self.is_sqlite:
            path = url.removeprefix("sqlite:///")
            if path and path != ":memory:":
                Path(path).parent.mkdir(parents=True, exist_ok=True)
                self.sqlite_file = path
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
            self.conninfo = libpq_conninfo(url)
            self.listen_conninfo = libpq_conninfo(listen_url) if listen_url else self.conninfo
            if not prepared_statements:
                self._connect_args["prepare_threshold"] = None
            self.engine = create_engine(
                "postgresql+psycopg://",
                echo=echo,
                hide_parameters=True,  # database errors are logged; bound values may be secret
                pool_size=pool_size,
                max_overflow=pool_size // 2,
                connect_args=self._connect_args,
            )
            _connect_by_libpq(self.engine, self.conninfo)
            _ping_when_idle(self.engine, ping_after_idle)
            write_engine = self.engine
        info = {_DATABASE: self}  # for database_of(session)
        self._read_sessions = sessionmaker(self.engine, expire_on_commit=False, info=info)
        self._write_sessions = sessionmaker(write_engine, expire_on_commit=False, info=info)
        if not self.is_sqlite:
            for sessions in (self._read_sessions, self._write_sessions):
                event.listen(sessions, "before_commit", self._send_deferred)
                event.listen(sessions, "after_rollback", _drop_deferred)
        self._sqlite_write_lock = threading.Lock()
        self._direct: dict[int, tuple[Select[*tuple[Any, ...]], DirectQuery]] = {}
        self._row_statements: dict[tuple[Any, ...], RowsStatement] = {}
        self._async_pools: dict[asyncio.AbstractEventLoop, AsyncConnectionPool] = {}

    @property
    def dialect(self) -> str:
        return self.engine.dialect.name

    @property
    def label(self) -> str:
        """The URL as it may be printed or logged: without its password."""
        return without_password(self.url)

    @contextmanager
    def session(self, *, write: bool = True) -> Iterator[Session]:
        """One unit of work: commit at the end of the block, roll back on error."""
        lock = self._sqlite_write_lock if self.is_sqlite and write else nullcontext()
        factory = self._write_sessions if write else self._read_sessions
        with unavailable_as_503(), lock, factory() as session:
            try:
                yield session
                session.commit()
            except BaseException:
                session.rollback()
                raise
        if write and self.checkpoints is not None:
            self.checkpoints.wake()

    @contextmanager
    def checkpointing(self) -> Iterator[None]:
        """While the block runs, a thread copies an SQLite file's WAL into it after writes,
        instead of the committing connection (``kuitti.checkpoints``); nothing on PostgreSQL or
        in memory. For the processes that serve, not for one-off commands."""
        if self.sqlite_file is None or self.checkpoints is not None:
            yield
            return
        self.checkpoints = BackgroundCheckpoints(self.sqlite_file)
        self.checkpoints.start()
        try:
            yield
        finally:
            checkpoints, self.checkpoints = self.checkpoints, None
            checkpoints.stop()

    def read_rows(
        self, statement: Select[*tuple[Any, ...]], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """The rows of a prebuilt ``SELECT``, run straight on a pooled driver connection in
        autocommit (one statement is its own consistent snapshot): plain tuples, each value
        converted by its column's type as SQLAlchemy would.

        For the hottest reads only, a statement built once at import: SQLAlchemy's execution
        layer (session, connection, transaction, result) costs a one-row read about 0.15 ms of
        CPU, the driver 0.01–0.03 ms; on PostgreSQL autocommit also saves the ``BEGIN`` and
        ``ROLLBACK`` round trips (docs/performance.md, "Reading"). Everything else goes through
        ``session()``."""
        with unavailable_as_503():
            return self._read_rows(statement, params)

    def _read_rows(
        self, statement: Select[*tuple[Any, ...]], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        query = self._direct_query(statement)
        values = query.parameters(params)
        connection = self.engine.raw_connection()
        try:
            driver = connection.driver_connection
            if not self.is_sqlite:  # SQLite's connections are in autocommit already (above)
                driver.autocommit = True  # type: ignore[union-attr]
            try:
                cursor = connection.cursor()
                cursor.execute(query.sql, values)
                rows = cursor.fetchall()
                cursor.close()
            finally:
                if not self.is_sqlite:
                    driver.autocommit = False  # type: ignore[union-attr]
        except self.engine.dialect.loaded_dbapi.Error as error:
            connection.invalidate()  # the pool drops it: it may be broken
            raise self._database_error(error, query.sql, values) from error
        finally:
            connection.close()
        return [query.converted(row) for row in rows]

    def session_rows(
        self, session: Session, statement: Select[*tuple[Any, ...]], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """``read_rows`` inside ``session``'s transaction, on its connection: for a hot lookup
        that must see what the transaction commits against (the ingest writer's check of its
        batch's key holders). ``session.execute`` costs such a read about 0.3 ms of CPU more."""
        query = self._direct_query(statement)
        rows = self._on_driver(session, query.sql, query.parameters(params), fetch=True)
        return [query.converted(row) for row in rows]

    def session_rows_together(
        self, session: Session, reads: Sequence[Read]
    ) -> list[list[tuple[Any, ...]]]:
        """``session_rows`` of each of ``reads``, in order; on PostgreSQL all of them in one
        pipeline, one round trip (with the transaction's ``BEGIN`` if it begins here). For the
        ingest writer's checks of a batch: each round trip is a wait for PostgreSQL's process,
        and on a busy machine for its turn on a core."""
        if self.is_sqlite:
            return [self.session_rows(session, statement, params) for statement, params in reads]
        queries = [self._direct_query(statement) for statement, _ in reads]
        driver = _driver_of(session)
        cursors = []
        sql, values = "", ()
        try:
            with driver.pipeline():
                for query, (_, params) in zip(queries, reads, strict=True):
                    sql, values = query.sql, query.parameters(params)
                    cursors.append(driver.cursor())
                    cursors[-1].execute(sql, values)
            return [
                [query.converted(row) for row in cursor.fetchall()]
                for query, cursor in zip(queries, cursors, strict=True)
            ]
        except self.engine.dialect.loaded_dbapi.Error as error:
            raise self._database_error(error, sql, values) from error
        finally:
            for cursor in cursors:
                cursor.close()

    def run_in(self, session: Session, sql: str) -> None:
        """A statement with no parameters and no rows (``NOTIFY``) in ``session``'s
        transaction, straight on the driver like ``session_rows``. On PostgreSQL it is sent
        with the transaction's next ``insert_rows`` or ``update_rows``, in their round trip, or
        else just before the commit: a ``NOTIFY`` takes effect at the commit wherever it was
        sent in the transaction, and the ingest writer's batch then waits for one round trip
        less."""
        if self.is_sqlite:
            self._on_driver(session, sql, (), fetch=False)
        else:
            session.info.setdefault(_DEFERRED, []).append(sql)

    def _send_deferred(self, session: Session) -> None:
        """What ``run_in`` left to send, now (before the commit)."""
        for sql in session.info.pop(_DEFERRED, ()):
            self._on_driver(session, sql, (), fetch=False)

    def _on_driver(
        self, session: Session, sql: str, values: Any, *, fetch: bool
    ) -> list[tuple[Any, ...]]:
        cursor = _driver_of(session).cursor()
        try:
            cursor.execute(sql, values)
            return cursor.fetchall() if fetch else []
        except self.engine.dialect.loaded_dbapi.Error as error:
            raise self._database_error(error, sql, values) from error
        finally:
            cursor.close()

    async def read_rows_async(
        self, statement: Select[*tuple[Any, ...]], params: Mapping[str, Any]
    ) -> list[tuple[Any, ...]]:
        """``read_rows`` from the event loop, where a request's reads cost least. SQLite's run
        inline: they are local and take some tens of microseconds, less than a hop to the
        threadpool costs (about 0.15 ms of CPU). PostgreSQL's go through the running loop's
        async pool (``open_async_reads``, which the app's lifespan calls), or through the
        threadpool on a loop without one."""
        if self.is_sqlite:
            return self.read_rows(statement, params)
        pool = self._async_pools.get(asyncio.get_running_loop())
        if pool is None:
            return await anyio.to_thread.run_sync(self.read_rows, statement, params)
        query = self._direct_query(statement)
        values = query.parameters(params)
        try:
            with unavailable_as_503():
                try:
                    rows = await _fetch_all(pool, query.sql, values, self.busy_wait)
                except PoolTimeout:
                    raise  # no connection could be had: waiting again would double the wait
                except psycopg.OperationalError:
                    # A connection that went away while idle (a server restart, an idle
                    # timeout): the pool drops the broken ones, and the read, which changes
                    # nothing, runs once more.
                    await pool.check()
                    rows = await _fetch_all(pool, query.sql, values, self.busy_wait)
        except psycopg.Error as error:
            raise self._database_error(error, query.sql, values) from error
        return [query.converted(row) for row in rows]

    def insert_rows(
        self, session: Session, tables: Mapping[type[Base], Sequence[Mapping[str, Any]]]
    ) -> None:
        """Insert each table's rows, in the mapping's order, in ``session``'s transaction: one
        statement on the driver per table (``RowsInsert``), each value converted by its
        column's type as SQLAlchemy would; on PostgreSQL all of them in one pipeline, one round
        trip.

        For the ingest writer's batches: SQLAlchemy's execution layer would cost a batch about
        0.2 ms a statement, and each statement would wait for its own round trip. The rows of a
        table name the same columns, and every column with a Python-side default among them: a
        compiled statement cannot supply one."""
        self._run_rows(
            session,
            [
                (
                    self._row_statement(RowsInsert, table(model), tuple(rows[0])),
                    rows,
                )
                for model, rows in tables.items()
                if rows
            ],
        )

    def update_rows(
        self,
        session: Session,
        model: type[Base],
        rows: Sequence[Mapping[str, Any]],
        *,
        match: tuple[str, ...],
        cleared: tuple[str, ...] = (),
    ) -> None:
        """Update, in ``session``'s transaction, the row of ``model`` that each of ``rows``
        names by its ``match`` columns: its other columns set to the row's values, ``cleared``
        set to NULL. A row that matches nothing (a lease taken back, say) changes nothing. One
        statement on the driver, like ``insert_rows`` (``RowsUpdate``): for the webhook
        worker, which records a batch of outcomes in every transaction."""
        if rows:
            columns = tuple(name for name in rows[0] if name not in match)
            statement = self._row_statement(RowsUpdate, table(model), match, columns, cleared)
            self._run_rows(session, [(statement, rows)])

    def _run_rows(
        self, session: Session, work: Sequence[tuple[RowsStatement, Sequence[Mapping[str, Any]]]]
    ) -> None:
        if not work:
            return
        driver = _driver_of(session)
        pipeline = nullcontext() if self.is_sqlite else driver.pipeline()
        sql: str = ""
        values: Any = ()
        try:
            with pipeline:
                cursor = driver.cursor()
                for statement, rows in work:
                    sql, values, one_statement = statement.for_rows(rows)
                    if one_statement:
                        cursor.execute(sql, values)
                    else:
                        cursor.executemany(sql, values)
                for sql in session.info.pop(_DEFERRED, ()):  # run_in's, in this round trip
                    values = ()
                    cursor.execute(sql)
                cursor.close()
        except self.engine.dialect.loaded_dbapi.Error as error:
            raise self._database_error(error, sql, values) from error

    def _row_statement(self, kind: type[RowsStatement], *args: Any) -> RowsStatement:
        """One ``kind`` of statement per table and columns, compiled on first use."""
        key = (kind, *args)
        known = self._row_statements.get(key)
        if known is None:
            known = self._row_statements[key] = kind(self.engine, *args)
        return known

    def _database_error(self, error: Exception, sql: str, values: Any) -> StatementError:
        """The driver's error as SQLAlchemy raises it for a session, bound values hidden as
        the engine hides them (they may be secret: a key digest)."""
        return DBAPIError.instance(
            sql,
            values,
            error,
            self.engine.dialect.loaded_dbapi.Error,
            hide_parameters=True,
            dialect=self.engine.dialect,
        )

    async def run_read(self, read: Callable[P, T], *args: P.args, **kwargs: P.kwargs) -> T:
        """Run ``read`` (short, sync reads through a session) where it costs least: inline on
        SQLite, as ``read_rows_async`` does; in the threadpool on PostgreSQL, whose every
        statement waits for the network."""
        if self.is_sqlite:
            return read(*args, **kwargs)
        return await anyio.to_thread.run_sync(functools.partial(read, *args, **kwargs))

    async def open_async_reads(self) -> None:
        """Open the running loop's pool for ``read_rows_async`` (PostgreSQL; SQLite needs
        none). Its connections are in autocommit: each read is one statement."""
        if self.is_sqlite or asyncio.get_running_loop() in self._async_pools:
            return
        # SQLAlchemy's connect arguments (the type adapters of its dialect), then libpq's URL.
        _args, connect = self.engine.dialect.create_connect_args(self.engine.url)
        pool = AsyncConnectionPool(
            self.conninfo,
            kwargs={**connect, **self._connect_args, "autocommit": True},
            min_size=1,
            max_size=ASYNC_READ_CONNECTIONS,
            timeout=self.async_read_wait,
            open=False,
            name="kuitti-reads",
        )
        await pool.open()
        self._async_pools[asyncio.get_running_loop()] = pool

    async def close_async_reads(self) -> None:
        pool = self._async_pools.pop(asyncio.get_running_loop(), None)
        if pool is not None:
            await pool.close()

    def _direct_query(self, statement: Select[*tuple[Any, ...]]) -> DirectQuery:
        known = self._direct.get(id(statement))
        if known is None:
            # Keyed by identity, the statement kept alive beside its compiled form.
            known = self._direct[id(statement)] = (statement, DirectQuery(self.engine, statement))
        return known[1]

    def dispose(self) -> None:
        self.engine.dispose()


def _drop_deferred(session: Session) -> None:
    """``run_in``'s statements of a transaction rolled back: never sent."""
    session.info.pop(_DEFERRED, None)


def _driver_of(session: Session) -> Any:
    """The driver's connection under ``session``, its transaction begun."""
    return session.connection().connection.driver_connection


async def _fetch_all(
    pool: AsyncConnectionPool, sql: str, values: Any, busy_wait: float | None
) -> list[tuple[Any, ...]]:
    """Run ``sql`` on a connection of ``pool`` (``_connection``)."""
    connection = await _connection(pool, busy_wait)
    try:
        async with connection:
            cursor = await connection.execute(sql, values)
            return await cursor.fetchall()
    finally:
        await pool.putconn(connection)


async def _connection(pool: AsyncConnectionPool, busy_wait: float | None) -> AsyncConnection[Any]:
    """A connection of ``pool``, waited for in ``READ_LINE``. With ``busy_wait``, a request that
    finds every connection the pool may have taken waits at most that long for one, then is
    refused (``ServiceBusy``: the process has more reads than connections, and a longer wait
    would only queue), or until its request's ``READ_BY`` if that comes first; one that waits
    because connections cannot be made waits the pool's whole timeout (then ``PoolTimeout``:
    the database is away)."""
    loop = asyncio.get_running_loop()
    joined = loop.time()
    read_by = READ_BY.get()
    if busy_wait is not None and read_by is not None:
        busy_wait = min(busy_wait, max(read_by - joined, SHORTEST_READ_WAIT))
    READ_LINE.waiting += 1
    try:
        try:
            return await pool.getconn(timeout=busy_wait)
        except PoolTimeout:
            if busy_wait is None:
                raise
            stats = pool.get_stats()
            if stats["pool_size"] >= stats["pool_max"]:
                raise ServiceBusy() from None
            return await pool.getconn(timeout=max(pool.timeout - busy_wait, 0.0))
    finally:
        READ_LINE.waiting -= 1
        READ_LINE.last_wait = loop.time() - joined


class DirectQuery:
    """A Core ``SELECT`` compiled once for one engine, with its parameters' and columns' type
    conversions (``Database.read_rows`` and ``session_rows`` run it)."""

    def __init__(self, engine: Engine, statement: Select[*tuple[Any, ...]]) -> None:
        dialect = engine.dialect
        compiled = statement.compile(dialect=dialect)
        self.sql = str(compiled)
        if "POSTCOMPILE" in self.sql:
            raise ValueError("read_rows cannot run expanding parameters (IN lists)")
        # Constants written into the statement are parameters too, with their values.
        self._defaults: dict[str, Any] = dict(compiled.params)
        self._to_driver: dict[str, Callable[[Any], Any]] = {}
        for name, bind in compiled.binds.items():
            process = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if process is not None:
                self._to_driver[name] = process
        # qmark drivers (SQLite) take a sequence in placeholder order, named ones a mapping.
        self._order = tuple(compiled.positiontup) if compiled.positional else None  # type: ignore[arg-type]
        self._from_driver = [
            (index, process)
            for index, column in enumerate(statement.selected_columns)
            if (process := column.type.dialect_impl(dialect).result_processor(dialect, None))
        ]

    def parameters(self, params: Mapping[str, Any]) -> Any:
        values = {**self._defaults, **params}
        for name, process in self._to_driver.items():
            values[name] = process(values[name])
        if self._order is None:
            return values
        return tuple(values[name] for name in self._order)

    def converted(self, row: Sequence[Any]) -> tuple[Any, ...]:
        values = list(row)
        for index, process in self._from_driver:
            value = values[index]
            if value is not None:
                values[index] = process(value)
        return tuple(values)


UNNEST_FROM_ROWS = 5
"""From how many rows ``RowsInsert`` sends PostgreSQL arrays: psycopg's cost of an array has a
fixed part (it looks through the list for the elements' type) that a few rows do not repay. In
``bench/write_batch.py`` a batch of one receipt cost the writer 0.91 ms as rows and 1.16 ms as
arrays; four, the same; six, 0.33 against 0.31 ms."""


class RowsStatement:
    """A statement that writes rows, all naming the same columns, in one call on the driver
    (``Database.insert_rows``, ``Database.update_rows``), each value converted by its column's
    type as SQLAlchemy would.

    Its row-at-a-time form is SQLAlchemy's own statement, run by ``executemany``: on SQLite one
    C loop. On PostgreSQL psycopg runs that loop row by row through its Python layer, which
    would cost the ingest writer about a tenth of its CPU, so from ``UNNEST_FROM_ROWS`` rows on
    it is one statement over ``unnest(…)`` of one array for each parameter, in binary: psycopg
    escapes a text array's elements one character at a time (a 17 KB document took
    milliseconds)."""

    def __init__(
        self,
        engine: Engine,
        compiled: SQLCompiler,
        fields: Mapping[str, tuple[str, TypeEngine[Any]]],
    ) -> None:
        """``fields``: for each parameter of ``compiled``, the key of its value in a row, and
        its column's type."""
        dialect = engine.dialect
        # SQLite's placeholders are positional, in the statement's order; PostgreSQL's are
        # named, and its array form takes them in the order of ``fields``.
        self.params: tuple[str, ...] = (
            tuple(compiled.positiontup)  # type: ignore[arg-type]
            if compiled.positional
            else tuple(fields)
        )
        self._keys = [fields[param][0] for param in self.params]
        self._to_driver = [
            fields[param][1].dialect_impl(dialect).bind_processor(dialect) for param in self.params
        ]
        self.sql = str(compiled)
        self._positional = compiled.positional
        self.array_sql: str | None = None
        """The statement over arrays (PostgreSQL), with a ``%b`` per parameter in order."""

    @staticmethod
    def arrays(dialect: Dialect, types: Sequence[TypeEngine[Any]]) -> str:
        """``unnest``'s arguments: a binary array parameter for each type."""
        return ", ".join(f"%b::{_unbounded(type_).compile(dialect=dialect)}[]" for type_ in types)

    def for_rows(self, rows: Sequence[Mapping[str, Any]]) -> tuple[str, Any, bool]:
        """The statement for ``rows``, its parameters, and whether it is run once (arrays)
        rather than once a row (``executemany``)."""
        values = self.columns_of(rows)
        if self.array_sql is not None and len(rows) >= UNNEST_FROM_ROWS:
            return self.array_sql, values, True
        by_row = zip(*values, strict=True)
        if self._positional:
            return self.sql, list(by_row), False
        return self.sql, [dict(zip(self.params, row, strict=True)) for row in by_row], False

    def columns_of(self, rows: Sequence[Mapping[str, Any]]) -> list[list[Any]]:
        """The rows' values, converted for the driver, one list per parameter."""
        out = []
        for key, process in zip(self._keys, self._to_driver, strict=True):
            column = [row[key] for row in rows]
            out.append(column if process is None else [process(value) for value in column])
        return out


class RowsInsert(RowsStatement):
    """Rows inserted into one table: SQLAlchemy's single-row ``INSERT``, or on PostgreSQL
    ``INSERT … SELECT * FROM unnest(…)``."""

    def __init__(self, engine: Engine, into: Table, columns: tuple[str, ...]) -> None:
        dialect = engine.dialect
        values = {name: bindparam(name, type_=into.c[name].type) for name in columns}
        compiled = insert(into).values(values).compile(dialect=dialect)
        if compiled.insert_prefetch:
            missing = ", ".join(column.name for column in compiled.insert_prefetch)
            raise ValueError(f"insert_rows needs a value for every defaulted column: {missing}")
        # SQLAlchemy writes the columns in the table's order, whatever the rows' order.
        ordered = [column.name for column in into.c if column.name in values]
        super().__init__(engine, compiled, {name: (name, into.c[name].type) for name in ordered})
        if dialect.name == "sqlite":
            return
        quote = dialect.identifier_preparer.quote
        arrays = self.arrays(dialect, [into.c[name].type for name in self.params])
        # Only the metadata's own names, quoted by the dialect, go into the text; values are
        # parameters.
        self.array_sql = (
            f"INSERT INTO {dialect.identifier_preparer.format_table(into)} "  # noqa: S608
            f"({', '.join(quote(name) for name in self.params)}) SELECT * FROM unnest({arrays})"
        )


class RowsUpdate(RowsStatement):
    """Rows of one table updated by the values of their ``match`` columns: SQLAlchemy's
    single-row ``UPDATE``, or on PostgreSQL ``UPDATE … FROM unnest(…)``."""

    def __init__(
        self,
        engine: Engine,
        into: Table,
        match: tuple[str, ...],
        columns: tuple[str, ...],
        cleared: tuple[str, ...],
    ) -> None:
        dialect = engine.dialect
        # Parameters are named apart from the columns: SQLAlchemy keeps a column's own name for
        # the SET clause.
        matched = {f"m_{name}": (name, into.c[name].type) for name in match}
        assigned = {f"v_{name}": (name, into.c[name].type) for name in columns}
        fields = matched | assigned
        statement = (
            update(into)
            .where(
                and_(*(into.c[name] == bindparam(param) for param, (name, _) in matched.items()))
            )
            .values(
                {name: bindparam(param, type_=type_) for param, (name, type_) in assigned.items()}
                | {name: null() for name in cleared}
            )
        )
        super().__init__(engine, statement.compile(dialect=dialect), fields)
        if dialect.name == "sqlite":
            return
        quote = dialect.identifier_preparer.quote
        target = dialect.identifier_preparer.format_table(into)
        names = [f"c{index}" for index in range(len(self.params))]
        source = dict(zip(self.params, names, strict=True))
        arrays = self.arrays(dialect, [fields[param][1] for param in self.params])
        settings = [f"{quote(name)} = v.{source['v_' + name]}" for name in columns] + [
            f"{quote(name)} = NULL" for name in cleared
        ]
        matches = [f"{target}.{quote(name)} = v.{source['m_' + name]}" for name in match]
        # As for inserts, only the metadata's names go into the text.
        self.array_sql = (
            f"UPDATE {target} SET {', '.join(settings)} "  # noqa: S608
            f"FROM unnest({arrays}) AS v({', '.join(names)}) WHERE {' AND '.join(matches)}"
        )


def _unbounded(type_: TypeEngine[Any]) -> TypeEngine[Any]:
    """The type of an array element cast for a column of ``type_``: text without its length,
    since an explicit cast to ``VARCHAR(3)`` cuts longer text short without a word, where the
    column's own assignment refuses it."""
    if isinstance(type_, String) and type_.length is not None:
        return String()
    return type_
