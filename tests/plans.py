"""Query plans for statement tests: what the database does with a statement the server sends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Executable, Select, event

from kuitti.db import Database


def explain(db: Database, statement: Select[*tuple[Any, ...]], params: Mapping[str, Any]) -> str:
    """The plan of a prebuilt ``SELECT`` as ``Database.read_rows`` runs it, one line a node.

    On PostgreSQL, sequential and bitmap scans are off for the one transaction: on the test
    database's small tables a scan is cheapest, and the question is which conditions an index
    takes, not which plan an empty table makes cheapest."""
    query = db._direct_query(statement)
    return _explain(db, query.sql, query.parameters(params))


def explain_in_session(db: Database, statement: Executable) -> str:
    """The plan of ``statement`` as a session sends it (its SQL and values caught at the
    driver, expanded ``IN`` lists included), explained as ``explain`` does."""
    sent: list[tuple[str, Any]] = []

    def catch(_conn: object, _cursor: object, sql: str, values: Any, *_args: object) -> None:
        sent.append((sql, values))

    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        with db.session(write=False) as session:
            session.execute(statement).all()
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
    [(sql, values)] = [(sql, values) for sql, values in sent if sql.lstrip().startswith("SELECT")]
    return _explain(db, sql, values)


def _explain(db: Database, sql: str, values: Any) -> str:
    connection = db.engine.raw_connection()
    try:
        cursor = connection.cursor()
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
