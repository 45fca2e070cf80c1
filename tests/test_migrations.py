"""The migrations build the schema the models declare, on the test database's backend."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import select, text

from kuitti.db import Base, Database
from kuitti.dbmigrate import HEAD_REVISION, not_ready_reason, schema_is_current, upgrade
from kuitti.migrate_alembic import script_head
from kuitti.models.cards import CardPaymentRecord
from kuitti.months import Month
from kuitti.partitions import compared, ensure_month_partitions, partitions
from kuitti.retention import drop_month
from kuitti.services import Services
from tests.plans import index_and_partitions


def test_the_migrated_schema_has_every_table_column_and_index_of_the_models(
    services: Services,
) -> None:
    with services.db.engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"include_object": compared})
        differences = compare_metadata(context, Base.metadata)
    assert differences == []


def _index_definition(services: Services, name: str) -> str:
    """The index's DDL as the database keeps it (autogenerate does not compare partial indexes'
    conditions, so they are checked here)."""
    query = (
        "SELECT sql FROM sqlite_master WHERE type = 'index' AND name = :name"
        if services.db.is_sqlite
        else "SELECT indexdef FROM pg_indexes WHERE indexname = :name"
    )
    with services.db.engine.connect() as connection:
        return str(connection.execute(text(query), {"name": name}).scalar_one())


def test_the_pre_authorised_amount_index_holds_only_pre_authorised_payments(
    services: Services,
) -> None:
    definition = _index_definition(services, "ix_card_payments_preauth")
    assert "pre_authorized_amount IS NOT NULL" in definition
    assert "merchant_id" in definition
    assert "paid_at" in definition


def test_a_lookup_by_pre_authorised_amount_can_use_the_partial_index(
    services: Services,
) -> None:
    """The matcher's reverse lookup compares the amount with a value, which implies the index's
    condition: without that, a transaction's lookup would scan every waiting payment."""
    lookup = select(CardPaymentRecord.id).where(
        CardPaymentRecord.merchant_id == "MID-0001",
        CardPaymentRecord.pre_authorized_amount == 1990,
        CardPaymentRecord.pan_last4 == "1234",
    )
    sql = str(lookup.compile(services.db.engine, compile_kwargs={"literal_binds": True}))
    with services.db.engine.begin() as connection:
        if services.db.is_sqlite:
            plan = " ".join(
                row[-1] for row in connection.execute(text("EXPLAIN QUERY PLAN " + sql))
            )
        else:
            # On an empty table the planner prefers a scan; forbid it to see what it may use.
            connection.execute(text("SET LOCAL enable_seqscan = off"))
            plan = " ".join(row[0] for row in connection.execute(text("EXPLAIN " + sql)))
    # On PostgreSQL, the index of each month's partition of card_payments (kuitti.partitions).
    pattern = r"USING (?:COVERING )?INDEX (\S+)" if services.db.is_sqlite else r"using (\S+) on"
    used = set(re.findall(pattern, plan))
    assert used, plan
    assert used <= set(index_and_partitions(services.db, "ix_card_payments_preauth")), plan


def test_the_head_revision_constant_names_the_newest_migration() -> None:
    """A new migration bumps ``HEAD_REVISION``: without it a migrated database would look
    behind (or a behind one current) to every command and to /readyz."""
    assert script_head() == HEAD_REVISION


def test_a_database_behind_the_head_is_seen_and_migrated(tmp_path: Path) -> None:
    db = Database(f"sqlite:///{tmp_path / 'behind.db'}")
    try:
        assert not schema_is_current(db)  # never migrated: no alembic_version table
        upgrade(db)
        assert schema_is_current(db)
        with db.engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '0005'"))
        assert not schema_is_current(db)
        assert not_ready_reason(db) == "run 'kuitti db upgrade'"
    finally:
        db.dispose()


@pytest.mark.postgres_only
def test_documents_are_compressed_with_lz4_in_every_months_partition(services: Services) -> None:
    """Migration 0010 sets LZ4 on the parent, which the partitions made later take, and on each
    partition made before (0007 made the partitioned table anew without it: pglz, twice the
    CPU to write a document)."""
    with services.db.session() as session:
        made = ensure_month_partitions(session, Month(2031, 5))
    try:
        with services.db.engine.connect() as connection:
            methods: dict[str, str] = dict(
                connection.execute(
                    text(
                        "SELECT a.attrelid::regclass::text, a.attcompression FROM pg_attribute a"
                        " WHERE a.attname = 'document' AND (a.attrelid = 'receipts'::regclass"
                        " OR a.attrelid IN (SELECT inhrelid FROM pg_inherits"
                        " WHERE inhparent = 'receipts'::regclass))"
                    )
                ).all()
            )
    finally:  # the other tests' database keeps the months it had
        with services.db.session() as session:
            [month] = [p for p in partitions(session, "receipts") if p.name in made]
            drop_month(session, month)
    assert "receipts_p203105" in methods
    assert set(methods.values()) == {"l"}, methods
