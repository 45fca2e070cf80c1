"""Transaction-scoped named locks, for check-then-insert sequences that must not race.

PostgreSQL: ``pg_advisory_xact_lock`` on a 64-bit hash of the name, released at commit or
rollback. SQLite: nothing to do, since every write transaction already holds the database's
single write lock (``BEGIN IMMEDIATE``).
"""

from __future__ import annotations

import hashlib

from sqlalchemy import text
from sqlalchemy.orm import Session


def lock_id(*parts: str) -> int:
    digest = hashlib.blake2b("\x1f".join(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def acquire(session: Session, *parts: str) -> None:
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text("SELECT pg_advisory_xact_lock(:id)"), {"id": lock_id(*parts)})
