"""Migration 0007 on a PostgreSQL database that holds receipts: the tables become partitioned
in place, every row stays where it is and reads as before, the foreign keys it leaves
``NOT VALID`` validate afterwards, and its downgrade is refused."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from alembic import command
from sqlalchemy import text

from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.ids import new_id
from kuitti.migrate_alembic import alembic_config
from kuitti.partitions import (
    add_months,
    first_partitioned_month,
    month_floor,
    partitions,
    prepare_partitioning,
    validate_foreign_keys,
)
from tests.conftest import PG_ADMIN_URL

pytestmark = pytest.mark.postgres_only
RECEIPTS = 50


@pytest.fixture
def old_database() -> Iterator[Database]:
    """A database of its own at revision 0006, with receipts, grants, deliveries and links."""
    name = f"kuitti_0007_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    db = Database(f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1))
    try:
        with db.engine.begin() as connection:
            config = alembic_config(db.url)
            config.attributes["connection"] = connection
            command.upgrade(config, "0006")
        fill(db)
        yield db
    finally:
        db.dispose()
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def fill(db: Database) -> None:
    now = datetime.now(UTC)
    partner, user = new_id(), new_id()
    with db.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO partners (id, name, roles, api_key_hash, public_client,"
                " redirect_uris, attachments_enabled, created_at, sandbox)"
                " VALUES (:id, 'Kauppa Oy', '[\"merchant\"]', :hash, false, '[]', false,"
                " :now, false)"
            ),
            {"id": partner, "hash": secrets.token_hex(32), "now": now},
        )
        connection.execute(
            text("INSERT INTO namespaces (name, partner_id, position) VALUES ('kauppa', :p, 0)"),
            {"p": partner},
        )
        connection.execute(
            text(
                "INSERT INTO users (id, email, password_hash, created_at)"
                " VALUES (:id, 'maija@example.com', 'x', :now)"
            ),
            {"id": user, "now": now},
        )
        for number in range(RECEIPTS):
            receipt = new_id()
            connection.execute(
                text(
                    "INSERT INTO receipts (id, partner_id, document, document_hash,"
                    " receipt_number, receipt_time, receipt_timestamp, merchant_name, total,"
                    " currency, token_statuses, created_at, return_count, sandbox)"
                    " VALUES (:id, :p, '{}', '', :n, :now, '', 'Kauppa Oy', 100, 'EUR', '[]',"
                    " :now, 0, false)"
                ),
                {"id": receipt, "p": partner, "n": f"R-{number}", "now": now},
            )
            connection.execute(
                text(
                    "INSERT INTO receipt_grants (id, partner_id, receipt_id, receipt_time, reason)"
                    " VALUES (:id, :p, :r, :now, 'posted')"
                ),
                {"id": new_id(), "p": partner, "r": receipt, "now": now},
            )
            connection.execute(
                text(
                    "INSERT INTO receipt_deliveries (user_id, receipt_id, receipt_time, via,"
                    " created_at) VALUES (:u, :r, :now, 'card', :now)"
                ),
                {"u": user, "r": receipt, "now": now},
            )
            connection.execute(
                text(
                    "INSERT INTO receipt_links (namespace, identifier, receipt_id)"
                    " VALUES ('kauppa', :n, :r)"
                ),
                {"n": f"id-{number}", "r": receipt},
            )


def counted(db: Database, table: str) -> int:
    with db.engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())  # noqa: S608


def test_0007_partitions_a_database_with_data_in_place(old_database: Database) -> None:
    db = old_database
    assert prepare_partitioning(db.engine, datetime.now(UTC))  # the online step first
    upgrade(db)
    for table in ("receipts", "receipt_grants", "receipt_deliveries"):
        assert counted(db, table) == RECEIPTS
        assert counted(db, f"{table}_legacy") == RECEIPTS
    assert counted(db, "receipt_links") == RECEIPTS
    assert validate_foreign_keys(db.engine)  # the re-pointed keys of unpartitioned tables
    assert validate_foreign_keys(db.engine) == []
    # A row of the first partitioned month goes to its partition; a link to it is checked.
    first = first_partitioned_month(datetime.now(UTC))
    later = uuid.UUID(int=month_floor(first).int + 1)
    with db.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO receipts SELECT :id, partner_id, document, document_hash, 'NEW',"
                " receipt_time, receipt_timestamp, merchant_name, total, currency,"
                " token_statuses, created_at, original_receipt_id, return_count, sandbox"
                " FROM receipts LIMIT 1"
            ),
            {"id": later},
        )
        where = connection.execute(
            text("SELECT tableoid::regclass::text FROM receipts WHERE id = :id"), {"id": later}
        ).scalar_one()
        names = [p.name for p in partitions(connection, "receipts")]
    assert where == f"receipts_p{first.year:04d}{first.month:02d}"
    assert f"receipts_p{add_months(first, 3).strftime('%Y%m')}" in names
    with pytest.raises(Exception, match="violates foreign key"), db.engine.begin() as connection:
        connection.execute(
            text(
                "INSERT INTO receipt_links (namespace, identifier, receipt_id)"
                " VALUES ('kauppa', 'x', :r)"
            ),
            {"r": uuid.UUID(int=later.int + 1)},
        )


def test_0007_downgrade_is_refused_on_postgresql(old_database: Database) -> None:
    upgrade(old_database)
    with old_database.engine.connect() as connection:  # a revision per transaction (0010)
        config = alembic_config(old_database.url)
        config.attributes["connection"] = connection
        with pytest.raises(RuntimeError, match="one-way"):
            command.downgrade(config, "0006")
