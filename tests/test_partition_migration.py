"""Migrations 0007 and 0009 on a PostgreSQL database that holds receipts: the tables become
partitioned in place, every row stays where it is and reads as before, the card payments' legacy
and month partitions refer to the receipts partitions of the same range, the foreign keys they
leave ``NOT VALID`` validate afterwards, and their downgrades are refused."""

from __future__ import annotations

import secrets
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import psycopg
import pytest
from alembic import command
from sqlalchemy import Connection, text
from sqlalchemy.orm import Session

from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.ids import new_id
from kuitti.migrate_alembic import alembic_config
from kuitti.partitioning import first_partitioned_month, prepare_partitioning, validate_foreign_keys
from kuitti.partitions import partition_name, partitions
from kuitti.retention import drop_month
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
            connection.execute(
                text(
                    "INSERT INTO card_payments (id, receipt_id, payment_index, status, amount,"
                    " currency, paid_at, reason, sandbox, created_at, updated_at)"
                    " VALUES (:id, :r, 0, 'waiting', 100, 'EUR', :now, '{}', false, :now, :now)"
                ),
                {"id": new_id(), "r": receipt, "now": now},
            )


def copy_a_receipt(connection: Connection, receipt_id: uuid.UUID) -> None:
    """A copy of a stored receipt under the id ``receipt_id``."""
    connection.execute(
        text(
            "INSERT INTO receipts SELECT :id, partner_id, document, document_hash, 'NEW',"
            " receipt_time, receipt_timestamp, merchant_name, total, currency,"
            " token_statuses, created_at, original_receipt_id, return_count, sandbox"
            " FROM receipts LIMIT 1"
        ),
        {"id": receipt_id},
    )


def keys_to_receipts(target: Connection | Session, *tables: str) -> dict[str, str]:
    """Each of ``tables`` and their partitions whose own foreign key refers to ``receipts`` or
    one of its partitions → the one it refers to."""
    found = target.execute(
        text(
            "SELECT conrelid::regclass::text, confrelid::regclass::text"
            " FROM pg_constraint WHERE contype = 'f' AND conparentid = 0"
            " AND confrelid::regclass::text LIKE 'receipts%'"
            " AND split_part(conrelid::regclass::text, '_p2', 1) = ANY(:tables)"
        ),
        {
            "tables": [
                name for table in tables for name in (table, f"{table}_legacy", f"{table}_default")
            ]
        },
    )
    return {str(table): str(referred) for table, referred in found}


def counted(db: Database, table: str) -> int:
    with db.engine.connect() as connection:
        return int(connection.execute(text(f"SELECT count(*) FROM {table}")).scalar_one())  # noqa: S608


def test_0007_partitions_a_database_with_data_in_place(old_database: Database) -> None:
    db = old_database
    assert prepare_partitioning(db.engine, datetime.now(UTC))  # the online step first
    upgrade(db)
    for table in ("receipts", "receipt_grants", "receipt_deliveries", "card_payments"):
        assert counted(db, table) == RECEIPTS
        assert counted(db, f"{table}_legacy") == RECEIPTS
    assert counted(db, "receipt_links") == RECEIPTS
    with db.engine.connect() as connection:
        # The payments' legacy partition ends where the receipts' does and refers to it; each
        # month's payments and deliveries refer to that month's receipts.
        bounds = {
            table: [(p.name, p.high) for p in partitions(connection, table)]
            for table in ("receipts", "card_payments")
        }
        keys = keys_to_receipts(connection, "card_payments", "receipt_deliveries")
    assert [high for _name, high in bounds["card_payments"]] == [
        high for _name, high in bounds["receipts"]
    ]
    for table in ("card_payments", "receipt_deliveries"):
        assert keys.pop(f"{table}_legacy") == "receipts_legacy"
        assert keys.pop(f"{table}_default") == "receipts"
    assert keys == {name: "receipts_" + name.rpartition("_")[2] for name in keys}
    assert len(keys) == 2 * 4
    assert validate_foreign_keys(db.engine)  # the re-pointed keys of unpartitioned tables
    assert validate_foreign_keys(db.engine) == []
    # A row of the first partitioned month goes to its partition; a link to it is checked.
    first = first_partitioned_month(datetime.now(UTC))
    later = uuid.UUID(int=first.first_id.int + 1)
    with db.engine.begin() as connection:
        copy_a_receipt(connection, later)
        where = connection.execute(
            text("SELECT tableoid::regclass::text FROM receipts WHERE id = :id"), {"id": later}
        ).scalar_one()
        names = [p.name for p in partitions(connection, "receipts")]
    assert where == f"receipts_p{first.year:04d}{first.month:02d}"
    assert f"receipts_p{(first + 3).year:04d}{(first + 3).month:02d}" in names
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


def test_0009_keeps_payments_posted_into_receipts_months_in_its_legacy_partition(
    old_database: Database,
) -> None:
    """A database that took receipts into a month's partition between 0007 and 0009: the
    payments' legacy partition runs to the next month boundary instead, refers to the receipts'
    parent, and a drop of that month deletes its payments by range."""
    db = old_database
    with db.engine.begin() as connection:
        config = alembic_config(db.url)
        config.attributes["connection"] = connection
        command.upgrade(config, "0008")
        [month] = [p for p in partitions(connection, "receipts") if p.month is not None][:1]
        assert month.low is not None
        receipt = uuid.UUID(int=month.low.int + 1)
        copy_a_receipt(connection, receipt)
        connection.execute(
            text(
                "INSERT INTO card_payments SELECT gen_random_uuid(), :id, payment_index, status,"
                " merchant_id, amount, pre_authorized_amount, currency, paid_at, masked_pan,"
                " pan_last4, authorization_code, reference_number, settle_at, reason, sandbox,"
                " created_at, updated_at FROM card_payments LIMIT 1"
            ),
            {"id": receipt},
        )
    upgrade(db)
    with db.engine.connect() as connection:
        [legacy] = [p for p in partitions(connection, "card_payments") if p.name.endswith("legacy")]
        where = connection.execute(
            text("SELECT tableoid::regclass::text FROM card_payments WHERE receipt_id = :id"),
            {"id": receipt},
        ).scalar_one()
        referred = connection.execute(
            text(
                "SELECT confrelid::regclass::text FROM pg_constraint"
                " WHERE conrelid = 'card_payments_legacy'::regclass AND contype = 'f'"
                " AND conparentid = 0"
            )
        ).scalar_one()
    assert legacy.high is not None
    assert legacy.high > month.low
    assert (where, referred) == ("card_payments_legacy", "receipts")
    with db.session() as session:
        steps = [what for what, _seconds in drop_month(session, month)]
    assert "delete from card_payments" in steps
    assert counted(db, "card_payments") == RECEIPTS


def test_0012_partitions_grants_by_their_receipt_and_moves_those_made_since_0007(
    old_database: Database,
) -> None:
    """Grants partitioned by their own id (0007) become partitioned by their receipt: the
    legacy partition is attached as it is (prepared online), a grant made after 0007 for a
    legacy receipt goes to it, one of a month's receipt to that month's partition, and each
    refers to its own range of receipts."""
    db = old_database
    with db.engine.connect() as connection:  # a revision per transaction (0010)
        config = alembic_config(db.url)
        config.attributes["connection"] = connection
        command.upgrade(config, "0011")
    with db.engine.begin() as connection:
        [month] = [p for p in partitions(connection, "receipts") if p.month is not None][:1]
        assert month.low is not None
        assert month.high is not None
        receipt = uuid.UUID(int=month.low.int + 1)
        copy_a_receipt(connection, receipt)
        legacy_receipt = connection.execute(
            text("SELECT id FROM receipts ORDER BY id LIMIT 1")
        ).scalar_one()
        for grant, receipt_id in (
            (uuid.UUID(int=month.low.int + 2), receipt),
            (uuid.UUID(int=month.high.int - 1), legacy_receipt),  # made since, for an old one
        ):
            connection.execute(
                text(
                    "INSERT INTO receipt_grants (id, partner_id, receipt_id, receipt_time, reason)"
                    " SELECT :id, partner_id, :r, receipt_time, 'connection'"
                    " FROM receipt_grants LIMIT 1"
                ),
                {"id": grant, "r": receipt_id},
            )
    prepared = prepare_partitioning(db.engine, datetime.now(UTC))
    assert any(line.startswith("ck_receipt_grants_legacy_bound: receipt_id <") for line in prepared)
    assert "ix_receipt_grants_partition_pk: (id, receipt_id)" in prepared
    upgrade(db)
    assert counted(db, "receipt_grants") == RECEIPTS + 2
    assert counted(db, "receipt_grants_legacy") == RECEIPTS + 1
    assert month.month is not None
    month_grants = partition_name("receipt_grants", month.month)
    assert counted(db, month_grants) == 1
    with db.engine.connect() as connection:
        bounds = {
            table: [p.high for p in partitions(connection, table)]
            for table in ("receipts", "receipt_grants")
        }
        keys = keys_to_receipts(connection, "receipt_grants")
        primary = connection.execute(
            text(
                "SELECT pg_get_constraintdef(oid) FROM pg_constraint"
                " WHERE conrelid = 'receipt_grants'::regclass AND contype = 'p'"
            )
        ).scalar_one()
    assert bounds["receipt_grants"] == bounds["receipts"]
    assert keys.pop("receipt_grants_legacy") == "receipts_legacy"
    assert keys.pop("receipt_grants_default") == "receipts"
    assert keys == {name: "receipts_" + name.rpartition("_")[2] for name in keys}
    assert primary == "PRIMARY KEY (id, receipt_id)"
    validated = validate_foreign_keys(db.engine)
    assert "receipt_grants_legacy.fk_receipt_grants_legacy_receipt_id validated" in validated
    with db.session() as session:
        steps = [what for what, _seconds in drop_month(session, month)]
    assert f"detach {month_grants}" in steps
    assert counted(db, "receipt_grants") == RECEIPTS + 1


def test_0012_downgrade_is_refused_on_postgresql(old_database: Database) -> None:
    upgrade(old_database)
    with old_database.engine.connect() as connection:
        config = alembic_config(old_database.url)
        config.attributes["connection"] = connection
        with pytest.raises(RuntimeError, match="0012 is one-way"):
            command.downgrade(config, "0011")
