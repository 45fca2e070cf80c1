"""The sandbox clean-up finds its batch through the index that holds only sandbox receipts, on
both databases: written as SQLAlchemy writes a boolean (``sandbox IS true``, ``sandbox = 1``),
neither database saw that the index applies, and each batch read every receipt (1.8 s at two
million stored). Each statement that deletes the batch, and on SQLite each that reads its pages
ahead (``kuitti.readahead``), searches an index too. The plan as the database gives it
(``tests/plans.py``)."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import event, func, select

from kuitti.db import Base
from kuitti.partners.service import NewPartner
from kuitti.readahead import KEYS, Rows, read_ahead, read_in_parallel, read_statements
from kuitti.receipts.sandbox import expired_sandbox_receipts, purge_batch
from kuitti.retention import delete_receipt_batch, rows_of_receipts
from kuitti.services import Services
from tests.conftest import BACKEND, CLOCK_START
from tests.factories import auth, card_payment, make_partner, receipt_doc, token_body
from tests.plans import explain_in_session, explain_sql, index_and_partitions

WRITES = ("UPDATE", "DELETE")


def test_the_purge_batch_is_a_range_of_the_sandbox_index(services: Services) -> None:
    plan = explain_in_session(services.db, expired_sandbox_receipts(CLOCK_START, 500))
    if services.db.dialect == "postgresql":
        # One range of the index, or of each month's partition of it (kuitti.partitions).
        indexes = index_and_partitions(services.db, "ix_receipts_sandbox_created")
        scans = re.findall(r"using (\S+) on receipts\S*.*\n\s*Index Cond: \(created_at <", plan)
        assert scans, plan
        assert set(scans) <= set(indexes), plan
    else:
        assert "USING INDEX ix_receipts_sandbox_created (created_at<?)" in plan, plan


def post(client: httpx.Client, partner: NewPartner, doc: dict[str, Any]) -> str:
    answer = client.post("/api/v1/receipts/", json=doc, headers=auth(partner.api_key))
    assert answer.status_code == 200, answer.text
    receipt_id: str = answer.json()["receipt_id"]
    return receipt_id


def sandbox_receipts(client: httpx.Client, services: Services) -> list[uuid.UUID]:
    """A sandbox purchase paid by card, with a link, and its return."""
    test_merchant = make_partner(services, sandbox=True, namespaces=["testi"])
    doc = receipt_doc()
    doc["payments"] = [card_payment(doc["totalPriceIncVAT"])]
    token = {"type": "RECEIPT_ID", "namespace": "testi", "value": "T-1"}
    original = post(client, test_merchant, token_body(doc, token))
    refund = receipt_doc(type="RETURN", payments=None, originalReceiptId=original)
    return [uuid.UUID(original), uuid.UUID(post(client, test_merchant, refund))]


def test_every_statement_of_a_batch_searches_an_index(
    client: httpx.Client, services: Services
) -> None:
    """Each UPDATE and DELETE of a purge batch finds its rows through an index: on
    PostgreSQL no sequential scan (scans off, as ``tests/plans.py`` explains), on SQLite a
    SEARCH for every table it reads."""
    sandbox_receipts(client, services)
    sent: list[tuple[str, Any]] = []

    def catch(_conn: object, _cursor: object, sql: str, values: Any, *_args: object) -> None:
        sent.append((sql, values))

    event.listen(services.db.engine, "before_cursor_execute", catch)
    try:
        later = services.clock.now() + timedelta(days=8)
        assert purge_batch(services.db, now=later, retention_days=7) == (2, 2)
    finally:
        event.remove(services.db.engine, "before_cursor_execute", catch)
    writes = [(sql, values) for sql, values in sent if sql.lstrip().startswith(WRITES)]
    assert len(writes) == 11, writes  # two updates, nine deletes
    for sql, values in writes:
        plan = explain_sql(services.db, sql, values)
        if services.db.dialect == "postgresql":
            assert "Seq Scan" not in plan, (sql, plan)
        else:
            scans = [line for line in plan.splitlines() if line.startswith("SCAN")]
            assert not scans, (sql, plan)
            assert "SEARCH" in plan, (sql, plan)


@pytest.mark.skipif(BACKEND != "sqlite", reason="reading ahead is SQLite's")
def test_reading_ahead_searches_every_index_of_each_table(
    client: httpx.Client, services: Services
) -> None:
    """Each read-ahead statement looks up a row's entry in every index of its table (partial
    ones too), and every lookup is a SEARCH: a scan would read a whole table in each batch."""
    ids = sandbox_receipts(client, services)
    rows = rows_of_receipts()
    for each, statement in zip(rows, read_statements(services.db, rows), strict=True):
        plan = explain_sql(services.db, statement.replace(KEYS, "(?, ?)"), [i.hex for i in ids])
        assert not [line for line in plan.splitlines() if line.startswith("SCAN")], plan
        with services.db.engine.connect() as connection:
            indexes = connection.exec_driver_sql(f"PRAGMA index_list({each.table})").all()
        assert indexes, each.table
        for _, name, _, origin, _ in indexes:
            # A table WITHOUT ROWID is its primary key's index.
            primary = "|PRIMARY KEY" if origin == "pk" else ""
            assert re.search(rf"SEARCH t USING ((COVERING )?INDEX {name}{primary}) \(", plan), plan


@pytest.mark.skipif(BACKEND != "sqlite", reason="reading ahead is SQLite's")
def test_reading_ahead_reads_a_batch_and_changes_nothing(
    client: httpx.Client, services: Services
) -> None:
    """Every read of a batch runs on the real schema (the purge itself skips them where the
    batch is in memory, as in a test's small file) and leaves every table as it was; the batch
    then goes whole."""
    ids = sandbox_receipts(client, services)
    before = counts(services)
    statements = read_statements(services.db, rows_of_receipts())
    read_in_parallel(services.db, statements, [i.hex for i in ids])
    assert counts(services) == before
    assert delete_receipt_batch(services.db, ids) == 2
    after = counts(services)
    assert {name: before[name] - after[name] for name in before if before[name] != after[name]} == {
        "receipts": 2,
        "receipt_links": 1,
        "receipt_grants": 2,
        "card_payments": 1,
        "card_matching_queue": 1,
    }


def counts(services: Services) -> dict[str, int]:
    with services.db.session(write=False) as session:
        return {
            table.name: session.scalar(select(func.count()).select_from(table)) or 0
            for table in Base.metadata.sorted_tables
        }


@pytest.mark.skipif(BACKEND != "sqlite", reason="reading ahead is SQLite's")
def test_a_failed_read_ahead_leaves_the_batch_to_go_as_it_would(
    client: httpx.Client, services: Services
) -> None:
    """Reading ahead only saves time: a read the schema refuses is logged, and the deletes
    run all the same."""
    ids = sandbox_receipts(client, services)
    refused = [Rows("receipts", f"d.no_such_column IN {KEYS}")]
    read_ahead(services.db, refused, [i.hex for i in ids])
    assert delete_receipt_batch(services.db, ids) == 2
