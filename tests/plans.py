"""Query plans for statement tests: what the database does with a statement the server sends."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from sqlalchemy import Executable, Select, event
from sqlalchemy.orm import Session

from kuitti.db import Database


def explain(db: Database, statement: Select[*tuple[Any, ...]], params: Mapping[str, Any]) -> str:
    """The plan of a prebuilt ``SELECT`` as ``Database.read_rows`` runs it, one line a node.

    On PostgreSQL, sequential and bitmap scans are off for the one transaction: on the test
    database's small tables a scan is cheapest, and the question is which conditions an index
    takes, not which plan an empty table makes cheapest; on SQLite, likewise, without the
    statistics other tests' rows left (``explain_sql``)."""
    query = db._direct_query(statement)
    return explain_sql(db, query.sql, query.parameters(params))


def explain_in_session(db: Database, statement: Executable) -> str:
    """The plan of ``statement`` as a session sends it (its SQL and values caught at the
    driver, expanded ``IN`` lists included), explained as ``explain_sent`` does."""
    return explain_sent(db, lambda session: session.execute(statement).all())


def explain_sent(db: Database, work: Callable[[Session], object], kind: str = "SELECT") -> str:
    """The plan of the one ``kind`` statement (``SELECT``, ``UPDATE``) that ``work`` sends in a
    session of its own (the ORM's flush included), explained as ``explain_sql`` does (on
    SQLite without the statistics other tests' rows left). The session
    commits: an ``UPDATE`` is explained after it ran."""
    sent: list[tuple[str, Any]] = []

    def catch(_conn: object, _cursor: object, sql: str, values: Any, *_args: object) -> None:
        sent.append((sql, values))

    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        with db.session(write=kind != "SELECT") as session:
            work(session)
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
    [(sql, values)] = [(sql, values) for sql, values in sent if sql.lstrip().startswith(kind)]
    return explain_sql(db, sql, values)


def explain_sql(db: Database, sql: str, values: Any, *, without: str | None = None) -> str:
    """The plan of ``sql`` with ``values`` as for large tables; a write is explained, not run.
    ``without``: an index dropped for the one explain (and put back), to see the plan the
    planner would take if it did not choose that index.

    PostgreSQL as ``explain`` does. SQLite without the planner's statistics for the one
    explain (``ANALYZE`` of the test database's few rows makes a scan of a tiny table cheapest;
    without statistics SQLite takes every table to be large), put back after it."""
    if db.dialect != "sqlite":
        return _explain(db, sql, values, without)
    connection = db.engine.raw_connection()
    try:
        cursor = connection.cursor()
        cursor.execute("BEGIN IMMEDIATE")
        if cursor.execute("SELECT 1 FROM sqlite_master WHERE name = 'sqlite_stat1'").fetchone():
            cursor.execute("DELETE FROM sqlite_stat1")
        if without is not None:
            cursor.execute(f"DROP INDEX {without}")
        cursor.execute("ANALYZE sqlite_schema")  # the planner reads the statistics again
        cursor.execute(f"EXPLAIN QUERY PLAN {sql}", values)
        lines = [row[3] for row in cursor.fetchall()]
        cursor.execute("ROLLBACK")
        cursor.execute("ANALYZE sqlite_schema")
        cursor.close()
    finally:
        connection.close()
    return "\n".join(lines)


def _explain(db: Database, sql: str, values: Any, without: str | None = None) -> str:
    connection = db.engine.raw_connection()
    try:
        cursor = connection.cursor()
        if without is not None:
            cursor.execute(f"DROP INDEX {without}")
        if db.dialect == "postgresql":
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_bitmapscan = off")
            cursor.execute(f"EXPLAIN {sql}", values)
            lines = [row[0] for row in cursor.fetchall()]
        else:
            cursor.execute(f"EXPLAIN QUERY PLAN {sql}", values)
            lines = [row[3] for row in cursor.fetchall()]
        cursor.close()
        connection.rollback()
    finally:
        connection.close()
    return "\n".join(lines)


def index_and_partitions(db: Database, index: str) -> list[str]:
    """``index`` and, on a partitioned PostgreSQL table, the index of each partition attached
    to it (``kuitti.partitions``): the names a plan may read it by."""
    if db.dialect != "postgresql":
        return [index]
    with db.engine.connect() as connection:
        names = connection.exec_driver_sql(
            "SELECT c.relname FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid"
            " WHERE i.inhparent = to_regclass(%(index)s)",
            {"index": index},
        ).scalars()
        return [index, *names]
