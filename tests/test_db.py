"""The connection pool (a connection that went away while idle is replaced before it is used),
the driver path of the hottest reads (``Database.read_rows``, ``session_rows``) and of the ingest
writer's statements (``Database.insert_rows``, ``run_in``)."""

from __future__ import annotations

import asyncio
import sqlite3
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from zoneinfo import ZoneInfo

import orjson
import psycopg
import pytest
from sqlalchemy import DateTime, Uuid, bindparam, event, func, insert, make_url, select, text
from sqlalchemy.dialects import sqlite
from sqlalchemy.exc import DBAPIError, IntegrityError
from sqlalchemy.orm import Session

import kuitti.db
from kuitti.db import (
    SQLITE_BUSY_TIMEOUT_MS,
    UNNEST_FROM_ROWS,
    ZSTD_FRAME,
    Database,
    Read,
    UTCDateTime,
    table,
    uuid_text,
)
from kuitti.errors import DatabaseUnavailable
from kuitti.models import Partner, Receipt, ReceiptGrant
from kuitti.services import Services
from tests.conftest import free_port
from tests.factories import grant_row, make_partner, receipt_rows


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


def test_read_rows_gives_the_values_a_session_gives(services: Services) -> None:
    """The driver path converts each column by its type exactly as SQLAlchemy does: UUIDs,
    aware UTC datetimes, booleans, JSON, and NULLs, with parameters converted the same way."""
    disabled = make_partner(services, name="Pois Oy").partner
    make_partner(services, name="Auki Oy", iban="FI2112345600000785")
    with services.db.session() as session:
        row = session.get(Partner, disabled.id)
        assert row is not None
        row.disabled_at = services.clock.now()
    statement = (
        select(
            Partner.id, Partner.name, Partner.roles, Partner.sandbox, Partner.iban,
            Partner.created_at, Partner.disabled_at,
        )
        .where(Partner.created_at <= bindparam("until"), Partner.name != "Nobody")
        .order_by(Partner.name)
    )  # fmt: skip
    params = {"until": services.clock.now()}
    with services.db.session(write=False) as session:
        expected = [tuple(row) for row in session.execute(statement, params)]
    assert len(expected) == 2
    got = services.db.read_rows(statement, params)
    assert got == expected
    # Equal is not enough (0 == False): the same types, too.
    assert [[type(value) for value in row] for row in got] == [
        [type(value) for value in row] for row in expected
    ]
    assert services.db.read_rows(statement, {"until": datetime(2000, 1, 1, tzinfo=UTC)}) == []


def test_uuid_text_is_the_text_str_writes(services: Services) -> None:
    """The database writes a stored UUID as ``str()`` does, through a session and on the
    driver path alike (SQLite keeps the digits without hyphens, PostgreSQL a ``uuid``)."""
    for n in range(3):
        make_partner(services, name=f"Oy {n}")
    every_digit = {"id": uuid.UUID("0123abcd-ef45-6789-abcd-ef0123456789")}
    stored = select(uuid_text(Partner.id), Partner.id)
    given = bindparam("id", type_=Uuid)
    bound = select(uuid_text(given), given)
    with services.db.session(write=False) as session:
        through_session = [*session.execute(stored), *session.execute(bound, every_digit)]
    on_the_driver = [
        *services.db.read_rows(stored, {}),
        *services.db.read_rows(bound, every_digit),
    ]
    for rows in (through_session, on_the_driver):
        assert len(rows) == 4
        assert all(type(text) is str and text == str(value) for text, value in rows)


def test_session_rows_reads_inside_the_sessions_transaction(services: Services) -> None:
    """What the session wrote and has not committed is seen, converted as a session converts
    it; once the session rolls back, it is gone."""
    partner = make_partner(services).partner
    statement = select(Partner.id, Partner.name, Partner.roles, Partner.disabled_at).where(
        Partner.id == bindparam("id")
    )

    def read_own_write(session: Session) -> None:
        row = session.get(Partner, partner.id)
        assert row is not None
        row.name, row.disabled_at = "Uusi Oy", services.clock.now()
        session.flush()
        expected = [tuple(r) for r in session.execute(statement, {"id": partner.id})]
        got = services.db.session_rows(session, statement, {"id": partner.id})
        assert got == expected
        assert got[0][1] == "Uusi Oy"
        assert [type(value) for value in got[0]] == [type(value) for value in expected[0]]

    _rolled_back(services.db, read_own_write)
    [(_, name, _, disabled_at)] = services.db.read_rows(statement, {"id": partner.id})
    assert (name, disabled_at) == (partner.name, None)


class _RolledBack(Exception):
    pass


def _rolled_back(db: Database, work: Callable[[Session], None]) -> None:
    """Run ``work`` in a write session that then rolls back."""

    def run() -> None:
        with db.session() as session:
            work(session)
            raise _RolledBack

    with pytest.raises(_RolledBack):
        run()


def test_a_failed_session_read_is_sqlalchemys_error_without_values(services: Services) -> None:
    statement = select(func.no_such_function(bindparam("secret")))
    with pytest.raises(DBAPIError) as failed, services.db.session() as session:
        services.db.session_rows(session, statement, {"secret": "s3cr3t-digest"})
    assert "parameters hidden" in str(failed.value)
    assert "s3cr3t-digest" not in str(failed.value)


@pytest.mark.postgres_only
def test_run_in_sends_its_statement_in_the_sessions_transaction(services: Services) -> None:
    """A ``NOTIFY`` run on the driver is delivered when the session commits, and not at all
    when it rolls back: it is part of the session's transaction."""
    url = make_url(services.db.url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as listener:
        listener.execute("LISTEN kuitti_test_channel")
        _rolled_back(
            services.db,
            lambda session: services.db.run_in(
                session, "NOTIFY kuitti_test_channel, 'rolled back'"
            ),
        )
        with services.db.session() as session:
            services.db.run_in(session, "NOTIFY kuitti_test_channel, 'committed'")
            listener.execute("SELECT 1")
            assert list(listener.notifies(timeout=0, stop_after=1)) == []
        listener.execute("SELECT 1")
        payloads = [n.payload for n in listener.notifies(timeout=5, stop_after=1)]
    assert payloads == ["committed"]


def test_read_rows_refuses_an_expanding_parameter(services: Services) -> None:
    statement = select(Partner.id).where(Partner.name.in_(bindparam("names", expanding=True)))
    with pytest.raises(ValueError, match="expanding"):
        services.db.read_rows(statement, {"names": ["a"]})


@pytest.mark.postgres_only
def test_read_rows_leaves_no_transaction_open(services: Services) -> None:
    """Autocommit for the read, then the connection goes back to the pool as sessions expect
    it: not in autocommit, and idle (no transaction left open for a session to inherit)."""
    db = Database(services.db.url, pool_size=1)
    try:
        assert db.read_rows(select(Partner.id).limit(1), {}) is not None
        connection = db.engine.raw_connection()  # the pool's one connection
        try:
            driver = connection.driver_connection
            assert isinstance(driver, psycopg.Connection)
            assert driver.autocommit is False
            assert driver.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
        finally:
            connection.close()
    finally:
        db.dispose()


@pytest.mark.postgres_only
def test_an_async_read_outlives_a_connection_ended_while_idle(services: Services) -> None:
    """The event loop's pool for the hottest reads: a read whose connection went away (a server
    restart, an idle timeout) is run again on a fresh one, not answered with an error."""
    db = Database(services.db.url, pool_size=1)
    backend = select(func.pg_backend_pid())

    async def scenario() -> tuple[int, int]:
        await db.open_async_reads()
        try:
            [(first,)] = await db.read_rows_async(backend, {})
            with services.db.session() as other:
                assert other.scalar(text("SELECT pg_terminate_backend(:pid)"), {"pid": first})
            [(second,)] = await db.read_rows_async(backend, {})
            return first, second
        finally:
            await db.close_async_reads()

    try:
        first, second = asyncio.run(scenario())
        assert second != first
    finally:
        db.dispose()


@pytest.mark.postgres_only
def test_an_async_read_fails_soon_when_the_database_cannot_be_reached(
    services: Services,
) -> None:
    """A read waits a bounded time for a connection, once, then fails as a session would: the
    database is unavailable (503)."""
    unreachable = make_url(services.db.url).set(host="127.0.0.1", port=free_port())
    db = Database(unreachable.render_as_string(hide_password=False), async_read_wait=0.5)

    async def scenario() -> float:
        await db.open_async_reads()
        started = time.monotonic()
        try:
            with pytest.raises(DatabaseUnavailable):
                await db.read_rows_async(select(func.pg_backend_pid()), {})
            return time.monotonic() - started
        finally:
            await db.close_async_reads()

    try:
        assert asyncio.run(scenario()) < 5
    finally:
        db.dispose()


def test_an_async_read_without_the_loops_pool_reads_the_same(services: Services) -> None:
    """On a loop whose pool was not opened (an app driven without its lifespan), PostgreSQL's
    reads go through the threadpool; SQLite's run inline either way."""
    make_partner(services, name="Auki Oy")
    statement = select(Partner.id, Partner.name, Partner.created_at).order_by(Partner.name)
    expected = services.db.read_rows(statement, {})

    async def without_pool() -> list[tuple[object, ...]]:
        return await services.db.read_rows_async(statement, {})

    async def with_pool() -> list[tuple[object, ...]]:
        await services.db.open_async_reads()
        try:
            return await services.db.read_rows_async(statement, {})
        finally:
            await services.db.close_async_reads()

    assert expected
    assert asyncio.run(without_pool()) == expected
    assert asyncio.run(with_pool()) == expected


def _stored(services: Services) -> list[tuple[Any, ...]]:
    columns = [c for c in table(Receipt).c if c.name != "id"]
    with services.db.session(write=False) as session:
        return [tuple(row) for row in session.execute(select(*columns).order_by(Receipt.id))]


@pytest.mark.postgres_only
def test_run_in_goes_with_the_next_rows_and_is_sent_once(services: Services) -> None:
    """A ``NOTIFY`` run before ``insert_rows`` goes in their round trip: delivered once when
    the session commits, never when the transaction that wrote the rows rolls back."""
    partner = make_partner(services).partner
    now = services.clock.now()
    url = make_url(services.db.url).set(drivername="postgresql")
    with psycopg.connect(url.render_as_string(hide_password=False), autocommit=True) as listener:
        listener.execute("LISTEN kuitti_test_channel")

        def write(session: Session, payload: str, number: str) -> None:
            services.db.run_in(session, f"NOTIFY kuitti_test_channel, '{payload}'")
            services.db.insert_rows(session, {Receipt: receipt_rows(partner.id, now, number)})

        _rolled_back(services.db, lambda session: write(session, "rolled back", "R-1"))
        with services.db.session() as session:
            write(session, "committed", "R-2")
            services.db.insert_rows(session, {Receipt: receipt_rows(partner.id, now, "R-3")})
        listener.execute("SELECT 1")
        payloads = [n.payload for n in listener.notifies(timeout=1, stop_after=2)]
    assert payloads == ["committed"]
    with services.db.session(write=False) as session:
        assert sorted(session.scalars(select(Receipt.receipt_number))) == ["R-2", "R-3"]


def test_session_rows_together_reads_what_each_read_alone_reads(services: Services) -> None:
    """Reads sent together answer in their order what each answers alone, inside the
    session's transaction (its own uncommitted write seen); a failed one is SQLAlchemy's error
    without the values."""
    partners = [make_partner(services, name=f"Yhdessä {n} Oy").partner for n in range(3)]
    by_id = select(Partner.id, Partner.name, Partner.roles, Partner.disabled_at).where(
        Partner.id == bindparam("id")
    )
    counted = select(func.count()).select_from(Partner)
    reads: list[Read] = [(by_id, {"id": p.id}) for p in reversed(partners)] + [(counted, {})]

    def read(session: Session) -> None:
        row = session.get(Partner, partners[0].id)
        assert row is not None
        row.name = "Uusi Oy"
        session.flush()
        together = services.db.session_rows_together(session, reads)
        alone = [services.db.session_rows(session, *read) for read in reads]
        assert together == alone
        assert [rows[0][1] for rows in together[:3]] == [
            partners[2].name,
            partners[1].name,
            "Uusi Oy",
        ]
        assert together[3][0][0] >= 3

    _rolled_back(services.db, read)
    failing: list[Read] = [
        (by_id, {"id": partners[0].id}),
        (select(func.no_such(bindparam("s"))), {"s": "x"}),
    ]
    with pytest.raises(DBAPIError) as failed, services.db.session() as session:
        services.db.session_rows_together(session, failing)
    assert "parameters hidden" in str(failed.value)


def test_insert_rows_stores_what_a_session_insert_stores(services: Services) -> None:
    """The driver path converts each parameter by its column's type as SQLAlchemy does (UUIDs,
    aware datetimes, JSON, booleans); a grant inserted after its receipt in the same call sees
    it (the order of the mapping is the order of the inserts)."""
    partner = make_partner(services).partner
    now = services.clock.now()
    by_session, by_driver = (
        receipt_rows(partner.id, now, "R-1"),
        receipt_rows(partner.id, now, "R-1"),
    )
    grant = grant_row(partner.id, by_driver[0]["id"], now)
    with services.db.session() as session:
        session.execute(insert(table(Receipt)), by_session)
    with services.db.session() as session:
        services.db.insert_rows(session, {Receipt: by_driver, ReceiptGrant: [grant]})
    first, second = _stored(services)
    assert first == second
    assert [type(value) for value in first] == [type(value) for value in second]
    with services.db.session(write=False) as session:
        stored = session.get(ReceiptGrant, grant["id"])
        assert stored is not None
        assert (stored.receipt_id, stored.receipt_time, stored.reason) == (
            by_driver[0]["id"],
            now,
            "posted",
        )


def test_insert_rows_keeps_every_value_of_many_rows_as_a_session_does(
    services: Services,
) -> None:
    """Many rows in one statement (on PostgreSQL one array per column): text that array syntax
    would have to escape, a column null in some rows only, 64-bit integers, JSON and booleans
    that differ from row to row."""
    partner = make_partner(services).partner
    now = services.clock.now()
    (original,) = receipt_rows(partner.id, now - timedelta(days=1), "R-0")
    numbers = ['"quoted", {braced}', "back\\slash", "NULL", "", "Åke's ☕", "x" * 200]
    assert len(numbers) >= UNNEST_FROM_ROWS  # arrays, on PostgreSQL
    by_session, by_driver = (receipt_rows(partner.id, now, *numbers) for _ in range(2))
    for rows in (by_session, by_driver):
        for index, row in enumerate(rows):
            row["total"] = (-1) ** index * (2**62 + index)
            row["sandbox"] = index % 2 == 0
            row["original_receipt_id"] = original["id"] if index % 2 else None
            row["token_statuses"] = [] if index % 3 else [{"status": numbers[index]}]
    with services.db.session() as session:
        session.execute(insert(table(Receipt)), [original])
        session.execute(insert(table(Receipt)), by_session)
        services.db.insert_rows(session, {Receipt: by_driver})
    columns = [c for c in table(Receipt).c if c.name != "id"]
    with services.db.session(write=False) as session:
        stored = {row[0]: tuple(row[1:]) for row in session.execute(select(Receipt.id, *columns))}
    assert [stored[row["id"]] for row in by_driver] == [stored[row["id"]] for row in by_session]
    assert [stored[row["id"]][3] for row in by_driver] == numbers


def test_insert_rows_takes_a_column_null_in_every_row(services: Services) -> None:
    """An array of nothing but nulls has no element type for the driver to find."""
    partner = make_partner(services).partner
    rows = receipt_rows(partner.id, services.clock.now(), *(f"R-{i}" for i in range(6)))
    for row in rows:
        row["original_receipt_id"] = None
    with services.db.session() as session:
        services.db.insert_rows(session, {Receipt: rows})
    with services.db.session(write=False) as session:
        stored = session.execute(select(Receipt.receipt_number, Receipt.original_receipt_id))
        assert sorted(stored) == [(f"R-{i}", None) for i in range(6)]


@pytest.mark.parametrize("count", [2, UNNEST_FROM_ROWS + 1])
def test_update_rows_moves_only_the_rows_it_names(services: Services, count: int) -> None:
    """Each row found by its match columns takes the new values (text that array syntax would
    escape, 64-bit integers, an aware time in another zone, JSON, booleans) and its cleared
    columns become NULL; a row whose match columns no longer agree (as a lease taken back) is
    left as it was. As rows (few) and, on PostgreSQL, as arrays (many)."""
    partner = make_partner(services).partner
    now = services.clock.now()
    (original,) = receipt_rows(partner.id, now - timedelta(days=1), "R-0")
    rows = receipt_rows(partner.id, now, *(f"R-{i}" for i in range(1, count + 2)))
    for row in rows:
        row["original_receipt_id"] = original["id"]
    with services.db.session() as session:
        services.db.insert_rows(session, {Receipt: [original]})
        services.db.insert_rows(session, {Receipt: rows})
    names = ['"quoted", {braced}', "back\\slash", "NULL", "", "Åke's ☕", "x" * 200, "y"]
    later = (now + timedelta(hours=1)).astimezone(ZoneInfo("Europe/Helsinki"))
    updates: list[dict[str, Any]] = [
        {
            "id": row["id"],
            "receipt_number": row["receipt_number"],
            "merchant_name": names[index % len(names)],
            "total": (-1) ** index * (2**62 + index),
            "receipt_time": later,
            "token_statuses": [{"status": names[index % len(names)]}],
            "sandbox": index % 2 == 1,
        }
        for index, row in enumerate(rows)
    ]
    updates[-1]["receipt_number"] = "no longer this one's"
    with services.db.session() as session:
        services.db.update_rows(
            session,
            Receipt,
            updates,
            match=("id", "receipt_number"),
            cleared=("original_receipt_id",),
        )
    with services.db.session(write=False) as session:
        stored = {
            receipt.id: (
                receipt.merchant_name,
                receipt.total,
                receipt.receipt_time,
                receipt.token_statuses,
                receipt.sandbox,
                receipt.original_receipt_id,
            )
            for receipt in session.scalars(select(Receipt))
        }
    for update in updates[:-1]:
        assert stored[update["id"]] == (
            update["merchant_name"],
            update["total"],
            later,
            update["token_statuses"],
            update["sandbox"],
            None,
        )
    left = rows[-1]
    assert stored[left["id"]] == (
        "Kauppa Oy",
        1250,
        now,
        left["token_statuses"],
        True,
        original["id"],
    )
    assert stored[original["id"]][5] is None


@pytest.mark.parametrize("rows", [1, UNNEST_FROM_ROWS])
def test_text_longer_than_its_column_is_refused_not_cut_short(
    services: Services, rows: int
) -> None:
    """PostgreSQL (SQLite does not enforce lengths): as rows and as arrays, a value over its
    column's length fails the insert as a session's would, instead of being stored cut short
    (what an explicit cast to the column's own type would do)."""
    if services.db.is_sqlite:
        pytest.skip("SQLite does not enforce VARCHAR lengths")
    partner = make_partner(services).partner
    receipts = receipt_rows(partner.id, services.clock.now(), *(f"R-{i}" for i in range(rows)))
    receipts[-1]["currency"] = "EURO"
    with pytest.raises(DBAPIError, match="too long"), services.db.session() as session:
        services.db.insert_rows(session, {Receipt: receipts})
    assert _stored(services) == []


def test_a_document_given_as_utf8_bytes_is_read_back_as_the_same_text(services: Services) -> None:
    """The writer hands the document over as orjson's bytes: whether by the driver path or a
    session, it reads back equal to the str form."""
    partner = make_partner(services).partner
    now = services.clock.now()
    text_form = '{"merchant":{"name":"Kahvila Äänekoski ☕"},"rows":[1,2]}'
    as_text, as_bytes, by_session = receipt_rows(partner.id, now, "R-1", "R-2", "R-3")
    as_text["document"] = text_form
    as_bytes["document"] = by_session["document"] = text_form.encode()
    with services.db.session() as session:
        services.db.insert_rows(session, {Receipt: [as_text, as_bytes]})
        session.execute(insert(table(Receipt)), [by_session])
    with services.db.session(write=False) as session:
        stored = session.scalars(select(Receipt.document).order_by(Receipt.id)).all()
    assert stored == [text_form] * 3


def _stored_documents(services: Services) -> list[Any]:
    """The documents as the database holds them, by receipt number."""
    with services.db.engine.connect() as connection:
        query = "SELECT document FROM receipts ORDER BY receipt_number"
        return list(connection.exec_driver_sql(query).scalars())


def test_sqlite_stores_a_document_compressed_and_reads_every_stored_form_alike(
    services: Services,
) -> None:
    """SQLite: a document is stored as a zstd frame, or as its UTF-8 bytes where compressing
    would not make it shorter; a document stored as text before compression reads alike.
    PostgreSQL stores the text (and compresses it itself)."""
    partner = make_partner(services).partner
    large = orjson.dumps({"merchant": {"name": "Kahvila Äänekoski ☕"}, "rows": [{"a": 1}] * 200})
    small = b'{"rows":[1]}'
    rows = receipt_rows(partner.id, services.clock.now(), "R-1", "R-2")
    rows[0]["document"], rows[1]["document"] = large, small
    with services.db.session() as session:
        services.db.insert_rows(session, {Receipt: rows})
    held = _stored_documents(services)
    if services.db.is_sqlite:
        assert held[0].startswith(ZSTD_FRAME)
        assert len(held[0]) < len(large) // 10
        assert held[1] == small
        with services.db.engine.begin() as connection:  # as revisions before 0010 stored it
            connection.exec_driver_sql(
                "UPDATE receipts SET document = CAST(document AS TEXT) WHERE receipt_number = 'R-2'"
            )
        assert _stored_documents(services)[1] == small.decode()
    else:
        assert held == [large.decode(), small.decode()]
    read = services.db.read_rows(
        select(Receipt.document).order_by(Receipt.receipt_number).where(Receipt.total > 0), {}
    )
    assert [document for (document,) in read] == [large.decode(), small.decode()]


@pytest.mark.parametrize(
    "value",
    [
        datetime(2026, 1, 15, 10, 0, 0, 123456, tzinfo=timezone(timedelta(hours=2))),
        datetime(2026, 3, 29, 4, 30, tzinfo=ZoneInfo("Europe/Helsinki")),
        datetime(2026, 12, 31, 23, 59, 59, 999999, tzinfo=timezone(timedelta(hours=-12))),
        datetime(1, 1, 2, tzinfo=UTC),
        datetime(9999, 12, 31, 23, 59, 59, 1, tzinfo=UTC),
    ],
)
def test_sqlite_stores_a_utc_time_as_sqlalchemys_datetime_text(value: datetime) -> None:
    """UTCDateTime writes SQLite's text itself: it must be the text SQLAlchemy's DATETIME wrote
    for every row stored before, and read back as the same instant."""
    dialect = sqlite.dialect()
    stored = UTCDateTime().dialect_impl(dialect).bind_processor(dialect)
    sqlalchemys = DateTime().dialect_impl(dialect).bind_processor(dialect)
    read = UTCDateTime().dialect_impl(dialect).result_processor(dialect, None)
    assert stored is not None
    assert sqlalchemys is not None
    assert read is not None
    text_form = stored(value)
    assert text_form == sqlalchemys(value.astimezone(UTC).replace(tzinfo=None))
    assert read(text_form) == value
    query = select(Receipt.id).where(Receipt.created_at >= value)
    inlined = str(query.compile(dialect=dialect, compile_kwargs={"literal_binds": True}))
    assert inlined.endswith(f">= '{text_form}'")


def test_insert_rows_needs_every_column_with_a_python_default(services: Services) -> None:
    partner = make_partner(services).partner
    rows = receipt_rows(partner.id, services.clock.now(), "R-1")
    del rows[0]["return_count"]
    with services.db.session() as session, pytest.raises(ValueError, match="return_count"):
        services.db.insert_rows(session, {Receipt: rows})
    assert _stored(services) == []


@pytest.mark.parametrize("grants", [2, UNNEST_FROM_ROWS])
def test_a_refused_row_fails_the_whole_insert_and_hides_the_values(
    services: Services, grants: int
) -> None:
    """A duplicate key in the last table of the call (row by row, and on PostgreSQL as arrays
    too): SQLAlchemy's error, as a session's would be, without the bound values; the
    transaction rolls back and nothing is stored."""
    partner = make_partner(services).partner
    now = services.clock.now()
    receipts = receipt_rows(partner.id, now, "R-1", "R-2")
    grant = grant_row(partner.id, receipts[0]["id"], now)
    with pytest.raises(IntegrityError) as refused, services.db.session() as session:
        services.db.insert_rows(session, {Receipt: receipts, ReceiptGrant: [grant] * grants})
    assert "parameters hidden" in str(refused.value)
    assert str(partner.id.hex) not in str(refused.value)
    assert _stored(services) == []


@pytest.fixture
def write_lock_held_elsewhere(services: Services) -> Iterator[sqlite3.Connection]:
    """Another connection to the database, holding SQLite's write lock until it ends its
    transaction (as another process's writer would)."""
    assert services.db.sqlite_file is not None
    other = sqlite3.connect(services.db.sqlite_file, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")
    try:
        yield other
    finally:
        if other.in_transaction:
            other.execute("ROLLBACK")
        other.close()


class _LockLetGoWhileAsleep:
    """Stands in for the ``time`` module of ``kuitti.db``: the first sleep of a writer waiting
    for the lock lets the other connection's transaction end."""

    def __init__(self, holder: sqlite3.Connection) -> None:
        self.holder = holder
        self.sleeps = 0
        self.monotonic = time.monotonic

    def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        if self.holder.in_transaction:
            self.holder.execute("COMMIT")


@pytest.mark.sqlite_only
def test_a_writer_waits_for_another_connections_write_lock(
    services: Services,
    write_lock_held_elsewhere: sqlite3.Connection,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = _LockLetGoWhileAsleep(write_lock_held_elsewhere)
    monkeypatch.setattr(kuitti.db, "time", clock)
    make_partner(services)  # a write transaction
    assert clock.sleeps == 1  # refused once, then begun as soon as the lock was let go
    with services.db.session(write=False) as session:
        assert session.execute(text("PRAGMA busy_timeout")).scalar() == SQLITE_BUSY_TIMEOUT_MS


@pytest.mark.sqlite_only
def test_a_writer_gives_up_after_its_busy_timeout(
    services: Services, write_lock_held_elsewhere: sqlite3.Connection
) -> None:
    db = Database(services.db.url, pool_size=1)

    @event.listens_for(db.engine, "connect")
    def _short_busy_timeout(dbapi_connection: sqlite3.Connection, _record: object) -> None:
        dbapi_connection.execute("PRAGMA busy_timeout=200")

    try:
        started = time.monotonic()
        with (
            pytest.raises(sqlite3.OperationalError, match="database is locked"),
            db.session() as session,
        ):
            session.execute(text("SELECT 1"))
        assert 0.2 <= time.monotonic() - started < 5
        write_lock_held_elsewhere.execute("ROLLBACK")
        with db.session() as session:  # the connection went back to the pool unharmed
            assert session.execute(text("PRAGMA busy_timeout")).scalar() == 200
    finally:
        db.dispose()
