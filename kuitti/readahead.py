"""SQLite: the pages a batch of deletes will touch, read before its write transaction by
several connections at once.

Deleting a row touches more than its row: its entry in every index of its table, the pages of
its long values, the rows beside it (a page a delete leaves nearly empty is merged with its
neighbours), and the rows of other tables that refer to it. In a file larger than what the
operating system keeps in memory, the old rows a clean-up deletes are on pages nobody has read
for months: SQLite reads them one at a time, as it meets them, while it holds the database's
one write lock. A receipt deleted at two million stored touched about ten such pages, and a
batch waited on each in turn (docs/scale.md, "At two million receipts").

``read_ahead`` reads those pages first, outside the write transaction, on
``READ_AHEAD_CONNECTIONS`` connections at once (a read of SQLite's releases the GIL, and the
disk serves reads given together faster than one after another); the deletes then find them in
the operating system's cache. For each table and the rows a condition picks, one ``SELECT``
reads each row whole and looks up its entry in every index of the table, found from the schema
as the database has it (a partial index with its own predicate), and the row on either side.
Only reads: what it reads decides nothing, and a row that changes meanwhile is what the
deletes' own statements see.

In a database the operating system holds in memory, reading ahead only doubles the work. So
the batch's first rows are read alone first: if that read nothing from storage (the process's
``read_bytes`` in ``/proc/self/io``), the batch is taken to be in memory and nothing more is
read. Where the counter cannot be read, every batch is read ahead. A read the schema refuses is
logged, and the deletes go on without it.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from kuitti.db import Database
from kuitti.logs import log

READ_AHEAD_CONNECTIONS = 4
SAMPLE_KEYS = 8
"""Keys of the first read, which tells whether the batch is in memory."""
KEYS = "{keys}"
"""Where a condition takes the list of keys: ``d.receipt_id IN {keys}``."""


@dataclass(frozen=True)
class Rows:
    """Rows of ``table`` (named ``d`` in ``condition``) that a batch deletes or updates."""

    table: str
    condition: str


def read_ahead(db: Database, rows: Sequence[Rows], keys: Sequence[object]) -> None:
    """Read every page that writing ``rows`` will touch, unless the first rows were all in
    memory. Nothing on PostgreSQL, whose deletes do not hold a database's one writer."""
    if not db.is_sqlite or not keys:
        return
    try:
        statements = read_statements(db, rows)
        with _driver(db) as driver:
            before = storage_reads()
            _read(driver, statements[:1], keys[:SAMPLE_KEYS])
            if before is not None and storage_reads() == before:
                return
        read_in_parallel(db, statements, keys)
    except sqlite3.Error as error:  # the writes go on, only slower (the tests hold the reads)
        log.warning("read-ahead failed", error=f"{type(error).__name__}: {error}"[:300])


def read_statements(db: Database, rows: Sequence[Rows]) -> list[str]:
    """``read_statement`` of each of ``rows``, with ``KEYS`` where the keys go."""
    with _driver(db) as driver:
        return [read_statement(driver, each) for each in rows]


def read_in_parallel(db: Database, statements: Sequence[str], keys: Sequence[object]) -> None:
    """Run ``statements``, ``keys`` shared out between ``READ_AHEAD_CONNECTIONS`` connections,
    each running every statement for its share."""
    size = -(-len(keys) // READ_AHEAD_CONNECTIONS)
    shares = [keys[start : start + size] for start in range(0, len(keys), size)]

    def read(share: Sequence[object]) -> None:
        with _driver(db) as driver:
            _read(driver, statements, share)

    with ThreadPoolExecutor(len(shares)) as pool:
        list(pool.map(read, shares))


@contextmanager
def _driver(db: Database) -> Iterator[sqlite3.Connection]:
    """A pooled connection's driver, in autocommit: each statement its own snapshot."""
    with db.engine.connect() as connection:
        driver = connection.connection.driver_connection
        assert isinstance(driver, sqlite3.Connection)
        yield driver


def _read(driver: sqlite3.Connection, statements: Sequence[str], keys: Sequence[object]) -> None:
    marks = "(" + ", ".join("?" * len(keys)) + ")"
    for statement in statements:
        driver.execute(statement.replace(KEYS, marks), list(keys)).fetchall()


def storage_reads() -> int | None:
    """Bytes this process has had read from storage (not from the page cache), or None where
    the system does not say."""
    try:
        counters = Path("/proc/self/io").read_bytes()
    except OSError:
        return None
    for line in counters.splitlines():
        if line.startswith(b"read_bytes:"):
            return int(line.split()[1])
    return None


def read_statement(driver: sqlite3.Connection, rows: Rows) -> str:
    """One ``SELECT`` whose answer is a single number, and which reads each row of ``rows``
    whole (``length`` of every column loads long values from their overflow pages), its entry
    in each index of the table (``INDEXED BY``: the index, or an error, never a scan) and the
    row before and after it."""
    table = rows.table
    columns = [name for _, name, *_ in driver.execute(f"PRAGMA table_info({table})")]
    reads = [f"length(d.{column})" for column in columns]
    for _, index, _, _, partial in driver.execute(f"PRAGMA index_list({table})"):
        keys = [name for _, _, name in driver.execute(f"PRAGMA index_info({index})")]
        if None in keys:
            continue  # an expression's entry: nothing here to look it up by
        match = [f"t.{key} IS d.{key}" for key in keys]
        if partial:
            match.append(f"({_predicate(driver, index)})")
        where = " AND ".join(match)
        reads.append(f"(SELECT 1 FROM {table} AS t INDEXED BY {index} WHERE {where})")  # noqa: S608
    if _has_rowid(driver, table):
        reads.append(f"(SELECT max(rowid) FROM {table} WHERE rowid < d.rowid)")  # noqa: S608
        reads.append(f"(SELECT min(rowid) FROM {table} WHERE rowid > d.rowid)")  # noqa: S608
    total = " + ".join(f"ifnull({read}, 0)" for read in reads)
    # Names from the schema, and conditions from kuitti's own code: no outside text.
    return f"SELECT sum({total}) FROM {table} AS d WHERE {rows.condition}"  # noqa: S608


def _predicate(driver: sqlite3.Connection, index: str) -> str:
    """The ``WHERE`` of a partial index, as its ``CREATE INDEX`` has it."""
    (sql,) = driver.execute("SELECT sql FROM sqlite_master WHERE name = ?", (index,)).fetchone()
    return re.split(r"\sWHERE\s", sql, flags=re.IGNORECASE)[-1]


def _has_rowid(driver: sqlite3.Connection, table: str) -> bool:
    (sql,) = driver.execute("SELECT sql FROM sqlite_master WHERE name = ?", (table,)).fetchone()
    return re.search(r"\)\s*WITHOUT\s+ROWID", sql, flags=re.IGNORECASE) is None
