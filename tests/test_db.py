"""The connection pool: a connection that went away while idle is replaced before it is used."""

from __future__ import annotations

import pytest
from sqlalchemy import select, text

from kuitti.db import Database
from kuitti.models import Partner
from kuitti.services import Services


@pytest.mark.postgres_only
def test_a_connection_ended_while_idle_is_replaced(services: Services) -> None:
    db = Database(services.db.url, pool_size=1, ping_after_idle=0.0)
    try:
        with db.session(write=False) as session:
            backend = session.scalar(text("SELECT pg_backend_pid()"))
        with services.db.session() as other:
            # What a server restart or an idle timeout does to the pooled connection.
            assert other.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": backend})
        with db.session(write=False) as session:
            assert session.scalar(text("SELECT pg_backend_pid()")) != backend
            session.execute(select(Partner.id).limit(1)).all()
    finally:
        db.dispose()
