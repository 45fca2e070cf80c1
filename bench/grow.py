"""Grow a filled PostgreSQL database to N receipts inside PostgreSQL (``INSERT ... SELECT``).

``bench/fill.py`` writes about 1,500 receipts a second through the driver: ten million would take
two hours. This copies the receipts a database holds (a fill's year) with every row that refers
to them, inside the database, until it holds ``--to`` receipts:

    .venv/bin/python bench/fill.py postgresql://kuitti:…@127.0.0.1/kuitti_10m --receipts 2000000 \\
        --keys 10m.json
    .venv/bin/python bench/grow.py postgresql://kuitti:…@127.0.0.1/kuitti_10m --to 10000000 \\
        --keys 10m.json

Copy ``k`` of ``F`` (the receipts there were, times ``F``, reach ``--to``; the last copy takes a
share of them, chosen by their ids' random bits) moves every receipt ``k × 365 / F`` days later,
and a year earlier where that would pass the moment the grow began: the copies fill the year
that ends now, each month about equally, the current month up to today included (posts during a
bench go to the current month's partition). Each receipt's rows move with it, by the same
shift: its id's time prefix (``kuitti.months``: ids say their month) and the ids of its rows
(grants, card payments, webhooks, e-mails), its receipt time and the stamps in its document,
card payment and webhook, every ``created_at`` and later time. What must stay unique gets
``-g<grow>c<copy>`` appended (the grow's moment in milliseconds, mod 10**8, and the copy's number):
the receipt number (in the document too), the ``RECEIPT_ID`` identifier, the
``Idempotency-Key``; a private e-mail link gets a new random part. The hashes
that follow the document (the resend hash, an idempotency record's request hash) are computed
again. How copies differ from fresh data (docs/scale.md, "At ten million receipts"): the
signature is the original's (it does not verify for the copy), copies repeat their original's
document, card and user, and the year's receipts arrive in ``F`` interleaved series.

Before copying, each month the copies land in gets its partitions (``kuitti.partitions``); on
a database partitioned less than a year ago the ``_legacy`` partition takes them, as it took
the fill. The source is cut into ``CHUNKS`` slices by id, each slice of each copy one
transaction, ``--jobs`` at once. Then ``VACUUM ANALYZE``, as a fill ends. Two million grew to
ten in 41 minutes with two jobs on a loaded machine (3,100 receipts a second). The summary of
``--keys`` (the fill's) gets the new counts. PostgreSQL only: SQLite is filled by
``bench/fill.py`` alone.
"""

from __future__ import annotations

import argparse
import functools
import itertools
import json
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import psycopg

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from sqlalchemy import create_engine

from kuitti.months import Month
from kuitti.partitions import ensure_month_partitions

YEAR = timedelta(days=365)
CHUNKS = 24  # source slices per copy: a transaction each
COUNTED = {
    "receipts": "receipts",
    "links": "receipt_links",
    "payments": "card_payments",
    "idempotency": "idempotency_records",
    "deliveries": "receipt_deliveries",
    "webhooks": "webhook_deliveries",
    "mail": "mail_messages",
}


def shifted(column: str) -> str:
    """``column``, a version 7 id, with ``chosen.shift_ms`` added to its time prefix."""
    hexed = f"replace({column}::text, '-', '')"
    return (
        f"(lpad(to_hex(('x' || substr({hexed}, 1, 12))::bit(48)::bigint + c.shift_ms), 12, '0')"
        f" || substr({hexed}, 13))::uuid"
    )


def stamp(column: str) -> str:
    """A receipt time as ``bench/fill.py`` writes it in documents: Helsinki winter time."""
    return (
        f"to_char(({column} + c.shift) AT TIME ZONE 'UTC' + interval '2 hours',"
        " 'YYYY-MM-DD\"T\"HH24:MI:SS') || '+02:00'"
    )


@dataclass(frozen=True)
class Chunk:
    """Source receipts with ids in [low, high), and the moments their ids were made in."""

    low: uuid.UUID
    high: uuid.UUID

    def at(self, row_id: uuid.UUID) -> datetime:
        return datetime.fromtimestamp((row_id.int >> 80) / 1000, UTC)

    @property
    def params(self) -> dict[str, object]:
        """The chunk's ids, the ids made in the same milliseconds (rows made with a receipt
        carry its time: webhooks), and those times (idempotency records' ``created_at``)."""
        first, last = self.low.int >> 80, (self.high.int >> 80) + 1
        return {
            "low": self.low,
            "high": self.high,
            "low_ms": uuid.UUID(int=first << 80),
            "high_ms": uuid.UUID(int=last << 80),
            "first": self.at(self.low),
            "last": self.at(uuid.UUID(int=last << 80)),
        }


def copy_chunk(pg: psycopg.Connection, copy: int, chunk: Chunk, shift: dict[str, int]) -> bool:
    """Copy ``chunk``'s receipts (``shift["share"]`` of 2**24 of them, by their ids' random
    bits) and their rows, each moved by its shift, in one transaction; False if an earlier
    run copied them (a grow that was stopped goes on where it was)."""
    # Unique to the grow and copy: two grows within one second (as a test makes) differ too.
    suffix = f"-g{shift['now'] % 100_000_000:08d}c{copy}"
    params = {**chunk.params, **shift, "suffix": suffix}
    run = functools.partial(pg.execute, params=params)
    with pg.transaction():
        run(
            "CREATE TEMP TABLE chosen ON COMMIT DROP AS SELECT id, shift_ms,"
            " shift_ms * interval '1 millisecond' AS shift FROM ("
            " SELECT id, CASE WHEN ms + %(shift)s >= %(now)s THEN %(shift)s - %(year)s"
            " ELSE %(shift)s END AS shift_ms FROM ("
            " SELECT id, ('x' || substr(replace(id::text, '-', ''), 1, 12))::bit(48)::bigint AS ms"
            " FROM grow_source WHERE id >= %(low)s AND id < %(high)s"
            " AND ('x' || right(id::text, 6))::bit(24)::int < %(share)s) t) s"
        )
        pg.execute("ALTER TABLE chosen ADD PRIMARY KEY (id)")
        pg.execute("ANALYZE chosen")
        document = (
            "replace(replace(r.document, '\"' || r.receipt_timestamp || '\"',"
            f" '\"' || {stamp('r.receipt_time')} || '\"'),"
            " '\"receiptNumber\":\"' || r.receipt_number || '\"',"
            " '\"receiptNumber\":\"' || r.receipt_number || %(suffix)s || '\"')"
        )
        # Each source receipt and its copy's id, stamp and document.
        run(
            "CREATE TEMP TABLE made ON COMMIT DROP AS SELECT r.id AS old_id,"  # noqa: S608
            f" {shifted('r.id')} AS id, r.receipt_timestamp AS old_stamp,"
            f" {stamp('r.receipt_time')} AS new_stamp, c.shift, {document} AS document"
            " FROM receipts r JOIN chosen c USING (id)"
            " WHERE r.id >= %(low)s AND r.id < %(high)s"
        )
        pg.execute("ALTER TABLE made ADD PRIMARY KEY (old_id)")
        done = pg.execute(
            "SELECT 1 FROM receipts WHERE id = (SELECT id FROM made ORDER BY old_id LIMIT 1)"
        ).fetchone()
        if done is not None:
            pg.execute("DROP TABLE chosen, made")
            return False
        pg.execute("ANALYZE made")
        digest = "encode(sha256(convert_to(m.document, 'UTF8')), 'hex')"
        run(
            "INSERT INTO receipts (id, partner_id, document, document_hash, receipt_number,"  # noqa: S608
            " receipt_time, receipt_timestamp, merchant_name, total, currency, token_statuses,"
            " created_at, return_count, sandbox, signature)"
            " SELECT m.id, r.partner_id, m.document,"
            f" CASE WHEN r.document_hash = '' THEN '' ELSE {digest} END,"
            " r.receipt_number || %(suffix)s, r.receipt_time + m.shift, m.new_stamp,"
            " r.merchant_name, r.total, r.currency, r.token_statuses, r.created_at + m.shift,"
            " r.return_count, r.sandbox, r.signature"
            " FROM receipts r JOIN made m ON m.old_id = r.id"
            " WHERE r.id >= %(low)s AND r.id < %(high)s"
        )
        run(
            f"INSERT INTO receipt_grants SELECT {shifted('g.id')}, g.partner_id,"  # noqa: S608
            f" {shifted('g.receipt_id')}, g.receipt_time + c.shift, g.reason, g.connection_id,"
            " g.card_id, g.card_user_id FROM receipt_grants g JOIN chosen c ON c.id = g.receipt_id"
            " WHERE g.receipt_id >= %(low)s AND g.receipt_id < %(high)s"
        )
        run(
            f"INSERT INTO receipt_deliveries SELECT d.user_id, {shifted('d.receipt_id')},"  # noqa: S608
            " d.receipt_time + c.shift, d.via, d.created_at + c.shift"
            " FROM receipt_deliveries d JOIN chosen c ON c.id = d.receipt_id"
            " WHERE d.receipt_id >= %(low)s AND d.receipt_id < %(high)s"
        )
        run(
            "INSERT INTO card_payments (id, receipt_id, payment_index, status, merchant_id,"  # noqa: S608
            " amount, pre_authorized_amount, currency, paid_at, masked_pan, pan_last4,"
            " authorization_code, reference_number, settle_at, reason, sandbox, created_at,"
            f" updated_at) SELECT {shifted('p.id')}, {shifted('p.receipt_id')},"
            " p.payment_index, p.status, p.merchant_id, p.amount, p.pre_authorized_amount,"
            " p.currency, p.paid_at + c.shift, p.masked_pan, p.pan_last4, p.authorization_code,"
            " p.reference_number, p.settle_at + c.shift,"
            " replace(p.reason::text, m.old_stamp, m.new_stamp)::json, p.sandbox,"
            " p.created_at + c.shift, p.updated_at + c.shift FROM card_payments p"
            " JOIN chosen c ON c.id = p.receipt_id JOIN made m ON m.old_id = p.receipt_id"
            " WHERE p.receipt_id >= %(low)s AND p.receipt_id < %(high)s"
        )
        run(
            "INSERT INTO receipt_links SELECT l.namespace, l.identifier || %(suffix)s,"  # noqa: S608
            f" {shifted('l.receipt_id')}, l.shareable"
            " FROM receipt_links l JOIN chosen c ON c.id = l.receipt_id"
            " WHERE l.receipt_id >= %(low)s AND l.receipt_id < %(high)s"
        )
        # Idempotency records and webhooks name their receipt only in their text: found by
        # their time, which is their receipt's (its id's milliseconds).
        run(
            "INSERT INTO idempotency_records SELECT i.partner_id, i.key || %(suffix)s,"  # noqa: S608
            f" {digest}, i.status_code,"
            " replace(i.response_body, m.old_id::text, m.id::text), i.created_at + m.shift"
            " FROM idempotency_records i"
            " JOIN made m ON m.old_id = (i.response_body::json ->> 'receipt_id')::uuid"
            " WHERE i.created_at >= %(first)s AND i.created_at < %(last)s"
            " AND i.response_body LIKE '{\"receipt_id\"%%'"
        )
        run(
            "CREATE TEMP TABLE hooks ON COMMIT DROP AS SELECT w.id AS old_id,"  # noqa: S608
            f" {shifted('w.id')} AS id, c.shift, c.shift_ms, m.old_id AS receipt_id"
            " FROM webhook_deliveries w"
            " JOIN made m ON m.old_id = (w.payload::json ->> 'receipt_id')::uuid"
            " JOIN chosen c ON c.id = m.old_id"
            " WHERE w.id >= %(low_ms)s AND w.id < %(high_ms)s AND w.payload LIKE '{\"type\"%%'"
        )
        pg.execute(
            "INSERT INTO webhook_deliveries (id, partner_id, notification_type, payload,"
            " bare_authorization, delivered_at, status, attempt_count, next_attempt_at,"
            " created_at) SELECT h.id, w.partner_id, w.notification_type,"
            " replace(replace(w.payload, m.old_id::text, m.id::text), m.old_stamp, m.new_stamp),"
            " w.bare_authorization, w.delivered_at + h.shift, w.status, w.attempt_count,"
            " w.next_attempt_at + h.shift, w.created_at + h.shift"
            " FROM webhook_deliveries w JOIN hooks h ON h.old_id = w.id"
            " JOIN made m ON m.old_id = h.receipt_id"
        )
        pg.execute(
            "INSERT INTO webhook_attempts (delivery_id, at, status_code, latency_ms, error)"
            " SELECT h.id, a.at + h.shift, a.status_code, a.latency_ms, a.error"
            " FROM webhook_attempts a JOIN hooks h ON h.old_id = a.delivery_id"
        )
        run(
            "INSERT INTO mail_messages (id, to_address, subject, text_body, html_body,"  # noqa: S608
            " receipt_id, receipt_link, sandbox, last_error, sent_at, status, attempt_count,"
            f" next_attempt_at, created_at) SELECT {shifted('e.id')}, e.to_address, e.subject,"
            f" e.text_body, e.html_body, {shifted('e.receipt_id')},"
            " left(e.receipt_link, length(e.receipt_link) - 32) || md5(random()::text),"
            " e.sandbox, e.last_error, e.sent_at + c.shift, e.status, e.attempt_count,"
            " e.next_attempt_at + c.shift, e.created_at + c.shift"
            " FROM mail_messages e JOIN chosen c ON c.id = e.receipt_id"
            " WHERE e.receipt_id >= %(low)s AND e.receipt_id < %(high)s"
        )
    return True


def counts(pg: psycopg.Connection) -> dict[str, int]:
    found = {}
    for key, table in COUNTED.items():
        row = pg.execute(f"SELECT count(*) FROM {table}").fetchone()  # noqa: S608
        found[key] = int(row[0]) if row else 0
    return found


def lowest_bits(url: str, count: int) -> int:
    """The bound below which ``count`` source receipts' last 24 random bits lie (a few more
    where they tie): the share of the last copy."""
    with psycopg.connect(url) as pg:
        row = pg.execute(
            "SELECT ('x' || right(id::text, 6))::bit(24)::int AS bits FROM grow_source"
            " ORDER BY bits OFFSET %s LIMIT 1",
            (count - 1,),
        ).fetchone()
    return int(row[0]) + 1 if row else 1 << 24


def months_between(first: datetime, last: datetime) -> list[Month]:
    months, month = [], Month.of(first)
    while month <= Month.of(last):
        months.append(month)
        month += 1
    return months


def chunks(pg: psycopg.Connection, count: int) -> list[Chunk]:
    """``grow_source`` in ``count`` slices of about as many receipts."""
    fractions = [index / count for index in range(count + 1)]
    row = pg.execute(
        "SELECT percentile_disc(%s::float8[]) WITHIN GROUP (ORDER BY id) FROM grow_source",
        (fractions,),
    ).fetchone()
    edges: list[uuid.UUID] = sorted(set(row[0])) if row else []
    edges[-1] = uuid.UUID(int=edges[-1].int + 1)  # the last slice holds the newest receipt
    return [Chunk(low, high) for low, high in itertools.pairwise(edges)]


def grow(url: str, target: int, jobs: int) -> dict[str, int]:
    """Copy the database's receipts until it holds ``target``, ``jobs`` slices at a time; the
    counts of ``COUNTED``. A grow stopped midway goes on where it was when run again: the
    receipts it copies from and its moment stay in ``grow_source`` and ``grow_state`` until
    it ends."""
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("CREATE TABLE IF NOT EXISTS grow_state (now_ms bigint NOT NULL)")
        row = pg.execute("SELECT now_ms FROM grow_state").fetchone()
        if row is None:
            now_ms = int(datetime.now(UTC).timestamp() * 1000)
            pg.execute("DROP TABLE IF EXISTS grow_source")
            pg.execute("CREATE UNLOGGED TABLE grow_source AS SELECT id FROM receipts ORDER BY id")
            pg.execute("ALTER TABLE grow_source ADD PRIMARY KEY (id)")
            pg.execute("INSERT INTO grow_state VALUES (%s)", (now_ms,))
        else:
            now_ms = int(row[0])
        row = pg.execute("SELECT count(*) FROM grow_source").fetchone()
        have = int(row[0]) if row else 0
        slices = chunks(pg, CHUNKS) if have else []
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    engine = create_engine(url.replace("postgresql://", "postgresql+psycopg://", 1))
    with engine.begin() as connection:
        for month in months_between(now - YEAR, now):
            ensure_month_partitions(connection, month)
    engine.dispose()
    tasks: list[tuple[int, Chunk, dict[str, int]]] = []
    if 0 < have < target:
        parts = -(-target // have)  # the source and its copies share the year
        day = 86_400_000
        left = target - have
        for copy in range(1, parts):
            share = 1 << 24 if left >= have else lowest_bits(url, left)
            shift = {
                "shift": round(copy * 365 / parts) * day,
                "now": now_ms,
                "year": 365 * day,
                "share": share,
            }
            tasks += [(copy, chunk, shift) for chunk in slices]
            left -= have
    began, done = time.monotonic(), itertools.count(1)

    def work(queue: list[tuple[int, Chunk, dict[str, int]]]) -> None:
        with psycopg.connect(url, autocommit=True) as pg:
            pg.execute("SET synchronous_commit = off")
            while queue:
                try:
                    copy, chunk, shift = queue.pop(0)
                except IndexError:
                    return
                copied = copy_chunk(pg, copy, chunk, shift)
                count = next(done)
                print(
                    f"  copy {copy} slice {count}/{len(tasks)}"
                    f" {'copied' if copied else 'was copied'}; {time.monotonic() - began:,.0f} s",
                    file=sys.stderr,
                    flush=True,
                )

    queue = list(tasks)
    with ThreadPoolExecutor(jobs) as pool:
        for future in [pool.submit(work, queue) for _ in range(jobs)]:
            future.result()
    with psycopg.connect(url, autocommit=True) as pg:
        pg.execute("DROP TABLE IF EXISTS grow_source, grow_state")
        started = time.monotonic()
        pg.execute("VACUUM ANALYZE")
        print(f"  VACUUM ANALYZE {time.monotonic() - started:,.0f} s", file=sys.stderr, flush=True)
        return counts(pg)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a PostgreSQL URL of a database bench/fill.py filled")
    parser.add_argument("--to", type=int, required=True, help="receipts it is to hold")
    parser.add_argument("--keys", type=Path, required=True, help="the fill's summary: updated")
    parser.add_argument("--jobs", type=int, default=2, help="slices copied at once")
    args = parser.parse_args()
    url = args.url.replace("postgresql+psycopg://", "postgresql://", 1)
    began = time.monotonic()
    found = grow(url, args.to, args.jobs)
    summary = json.loads(args.keys.read_text())
    summary.update(receipts=found["receipts"], counts=found)
    summary["grow_seconds"] = round(time.monotonic() - began, 1)
    args.keys.write_text(json.dumps(summary, indent=2))
    print(json.dumps({k: v for k, v in summary.items() if k != "merchants"}, indent=2))


if __name__ == "__main__":
    main()
