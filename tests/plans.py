"""Query plans for statement tests: what the database does with a statement the server sends."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import Delete, Select, Update

from kuitti.db import Database


def explain(db: Database, statement: Select[Any], params: Mapping[str, Any]) -> str:
    """The plan of a prebuilt ``SELECT`` as ``Database.read_rows`` runs it, one line a node.

    On PostgreSQL, sequential and bitmap scans are off for the one transaction: on the test
    database's small tables a scan is cheapest, and the question is which conditions an index
    takes, not which plan an empty table makes cheapest."""
    query = db._direct_query(statement)
    return _explain(db, query.sql, query.parameters(params))


def explain_change(db: Database, statement: Delete | Update) -> str:
    """The plan of a ``DELETE`` or ``UPDATE`` built with literal-free bound values."""
    compiled = statement.compile(dialect=db.engine.dialect)
    params = compiled.construct_params()
    processors: dict[str, Any] = dict(compiled._bind_processors)
    values: Any = {
        name: processors[name](value) if name in processors else value
        for name, value in params.items()
    }
    if compiled.positiontup is not None:
        values = tuple(values[name] for name in compiled.positiontup)
    return _explain(db, compiled.string, values)


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
