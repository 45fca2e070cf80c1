"""``bench/grow.py`` on a small fill (PostgreSQL): the copies reach the count asked for, lie in
the year that ends when the grow began, and are consistent the way fresh receipts are: ids say
the month of their rows' times, documents carry their own receipt time and number, the hashes
follow the documents, and every row that refers to a receipt refers to one that exists. A grow
run again on its result adds only what it is asked for."""

from __future__ import annotations

import secrets
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import psycopg
import pytest

from tests.conftest import PG_ADMIN_URL

BENCH = Path(__file__).resolve().parent.parent / "bench"
pytestmark = pytest.mark.postgres_only


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    monkeypatch.syspath_prepend(BENCH)
    import fill  # bench/fill.py
    import grow  # bench/grow.py

    return sys.modules[fill.__name__], sys.modules[grow.__name__]


@pytest.fixture
def filled_url(bench: tuple[ModuleType, ModuleType]) -> Iterator[str]:
    fill, _grow = bench
    name = f"kuitti_test_grow_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    url = f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    try:
        until = datetime.now(UTC) - timedelta(days=1)
        fill.fill(url.replace("postgresql://", "postgresql+psycopg://"), 400, until, 5)
        yield url
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


# Each query counts the rows that break one rule; all must be 0.
BROKEN = {
    "id's time is not created_at's": "SELECT count(*) FROM receipts WHERE date_trunc('second',"
    " created_at) <> date_trunc('second', to_timestamp(('x' || substr(replace(id::text, '-', ''),"
    " 1, 12))::bit(48)::bigint / 1000.0))",
    "document lacks its stamp or number": "SELECT count(*) FROM receipts WHERE"
    " position('\"' || receipt_timestamp || '\"' in document) = 0"
    " OR position('\"receiptNumber\":\"' || receipt_number || '\"' in document) = 0",
    "stamp is not the receipt time": "SELECT count(*) FROM receipts WHERE"
    " receipt_timestamp::timestamptz <> date_trunc('second', receipt_time)",
    "resend hash is not the document's": "SELECT count(*) FROM receipts WHERE document_hash <> ''"
    " AND document_hash <> encode(sha256(convert_to(document, 'UTF8')), 'hex')",
    "grant of another time": "SELECT count(*) FROM receipt_grants g JOIN receipts r"
    " ON r.id = g.receipt_id WHERE g.receipt_time <> r.receipt_time",
    "payment of another time": "SELECT count(*) FROM card_payments p JOIN receipts r"
    " ON r.id = p.receipt_id WHERE p.paid_at <> r.receipt_time OR p.created_at <> r.created_at",
    "delivery of another time": "SELECT count(*) FROM receipt_deliveries d JOIN receipts r"
    " ON r.id = d.receipt_id WHERE d.receipt_time <> r.receipt_time",
    "link without its receipt": "SELECT count(*) FROM receipt_links l LEFT JOIN receipts r"
    " ON r.id = l.receipt_id WHERE r.id IS NULL",
    "mail without its receipt": "SELECT count(*) FROM mail_messages m LEFT JOIN receipts r"
    " ON r.id = m.receipt_id WHERE r.id IS NULL OR m.created_at <> r.created_at",
    "idempotency answer of another receipt": "SELECT count(*) FROM idempotency_records i"
    " LEFT JOIN receipts r ON r.id = (i.response_body::json ->> 'receipt_id')::uuid"
    " WHERE r.id IS NULL OR i.created_at <> r.created_at"
    " OR i.request_hash <> encode(sha256(convert_to(r.document, 'UTF8')), 'hex')",
    "webhook of another receipt": "SELECT count(*) FROM webhook_deliveries w LEFT JOIN receipts r"
    " ON r.id = (w.payload::json ->> 'receipt_id')::uuid WHERE r.id IS NULL"
    " OR position(r.receipt_timestamp in w.payload) = 0 OR w.created_at <> r.created_at",
    "attempt without its webhook": "SELECT count(*) FROM webhook_attempts a"
    " LEFT JOIN webhook_deliveries w ON w.id = a.delivery_id WHERE w.id IS NULL",
}


def test_grow_copies_a_fill_consistently_into_the_year(
    bench: tuple[ModuleType, ModuleType], filled_url: str
) -> None:
    _fill, grow = bench
    with psycopg.connect(filled_url) as pg:
        before = grow.counts(pg)
    began = datetime.now(UTC)

    counts = grow.grow(filled_url, 1000, jobs=2)

    assert 1000 <= counts["receipts"] < 1010  # two copies and a share of a third
    for key in ("links", "payments", "idempotency", "deliveries", "webhooks", "mail"):
        assert counts[key] > 2 * before[key], key
    with psycopg.connect(filled_url) as pg:
        for rule, query in BROKEN.items():
            assert pg.execute(query).fetchone() == (0,), rule
        newest, oldest_copy = pg.execute(
            "SELECT max(created_at), min(created_at) FILTER (WHERE receipt_number LIKE '%-g%')"
            " FROM receipts"
        ).fetchone() or (None, None)
        assert newest is not None
        assert oldest_copy is not None
        assert newest <= datetime.now(UTC)
        assert oldest_copy >= began - timedelta(days=365, minutes=1)
        this_month = pg.execute(
            "SELECT count(*) FROM receipts WHERE created_at >= date_trunc('month', now())"
        ).fetchone()
        assert this_month is not None
        assert this_month[0] > 0  # the posts of today have neighbours
        leftovers = pg.execute("SELECT to_regclass('grow_source'), to_regclass('grow_state')")
        assert leftovers.fetchone() == (None, None)

    again = grow.grow(filled_url, 1500, jobs=1)

    assert 1500 <= again["receipts"] < 1520
