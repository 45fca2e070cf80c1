"""Bytes per receipt: a fresh database filled with N receipts of one shape, table by table.

For each shape (``--shapes``: a number of product rows per receipt, or ``mix`` for
``bench/fill.py``'s realistic spread, mean about 9 rows) and each database (``--database``), a
new database is migrated and filled by ``bench/fill.py`` (the real schema, bulk SQL, the fill's
mix of card payments, tokens, idempotency keys and deliveries), then measured:

- PostgreSQL: ``pg_relation_size`` of each table's heap (its partitions summed into the
  parent), its TOAST (``pg_table_size`` less the heap) and each index (the partitions' indexes
  summed into the parent's), after the fill's ``VACUUM ANALYZE``;
- SQLite: ``dbstat``'s pages of each table and index, as the fill left the file (its
  ``ANALYZE`` and checkpoint done, not vacuumed).

Printed: bytes per receipt of each table, its TOAST and its indexes, and the total, which is
the whole database (``pg_database_size`` or the file) divided by N. At 100,000 receipts and
more the per-receipt figures no longer move with N (the fixed tables are a few pages).

    .venv/bin/python bench/storage.py --receipts 100000
    .venv/bin/python bench/storage.py --database postgresql --shapes 4,60,mix --json out.json

PostgreSQL databases come from KUITTI_TEST_POSTGRES_URL (default
postgresql://kuitti:kuitti@127.0.0.1:5432/postgres) and are dropped afterwards.
"""

from __future__ import annotations

import argparse
import json
import random
import sqlite3
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import orjson
import psycopg
import zstandard

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fill import fill  # bench/ is the script's own directory
from ingest import realistic_receipt, tree_cpu_seconds
from scale import new_database

UNTIL = datetime.fromisoformat("2026-11-01T00:00:00+00:00")
PER_DAY = 6_700_000  # Finland's card payments a day (Bank of Finland, 2024)
# Emptied by their own retention within weeks (docs/operations.md, "Retention"): not a year's.
TRANSIENT = ("webhook_deliveries", "webhook_attempts", "mail_messages", "idempotency_records")


@dataclass
class Table:
    heap: int = 0
    toast: int = 0
    indexes: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return self.heap + self.toast + sum(self.indexes.values())


# Each table or index of the public schema, partitions summed into their parent.
PG_TABLES = """
WITH RECURSIVE tree AS (
    SELECT c.oid AS root, c.oid AS rel FROM pg_class c
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    UNION ALL
    SELECT tree.root, i.inhrelid FROM tree JOIN pg_inherits i ON i.inhparent = tree.rel
)
SELECT root::regclass::text,
       sum(pg_relation_size(rel, 'main') + pg_relation_size(rel, 'fsm')
           + pg_relation_size(rel, 'vm'))::bigint,
       sum(pg_table_size(rel) - pg_relation_size(rel, 'main') - pg_relation_size(rel, 'fsm')
           - pg_relation_size(rel, 'vm'))::bigint
FROM tree GROUP BY root
"""
PG_INDEXES = """
WITH RECURSIVE tree AS (
    SELECT x.indrelid::regclass::text AS tab, x.indexrelid AS root, x.indexrelid AS rel
    FROM pg_index x JOIN pg_class c ON c.oid = x.indrelid
    JOIN pg_namespace n ON n.oid = c.relnamespace
    WHERE n.nspname = 'public' AND NOT c.relispartition
    UNION ALL
    SELECT tree.tab, tree.root, i.inhrelid FROM tree JOIN pg_inherits i ON i.inhparent = tree.rel
)
SELECT tab, root::regclass::text, sum(pg_relation_size(rel))::bigint FROM tree GROUP BY tab, root
"""


def measure_postgresql(url: str) -> tuple[dict[str, Table], int]:
    tables: dict[str, Table] = {}
    with psycopg.connect(url) as connection:
        for name, heap, toast in connection.execute(PG_TABLES):
            tables[name] = Table(heap, toast)
        for table, index, size in connection.execute(PG_INDEXES):
            tables[table].indexes[index] = size
        total = connection.execute("SELECT pg_database_size(current_database())").fetchone()
    assert total is not None
    return tables, int(total[0])


def measure_sqlite(path: Path) -> tuple[dict[str, Table], int]:
    tables: dict[str, Table] = {}
    connection = sqlite3.connect(path)
    try:
        owner = dict(connection.execute("SELECT name, tbl_name FROM sqlite_master"))
        sizes = connection.execute("SELECT name, pgsize FROM dbstat WHERE aggregate = TRUE")
        for name, size in sizes:
            table = owner.get(name, name)
            entry = tables.setdefault(table, Table())
            if table == name:
                entry.heap += size
            else:
                entry.indexes[name] = size
    finally:
        connection.close()
    return tables, path.stat().st_size


def measure(kind: str, receipts: int, rows: int | None, workdir: Path) -> dict[str, object]:
    with new_database(kind, workdir, f"storage_{rows or 0}") as url:
        engine_url = url.replace("postgresql://", "postgresql+psycopg://", 1)
        fill(engine_url, receipts, UNTIL, seed=44, product_rows=rows)
        if kind == "sqlite":
            tables, total = measure_sqlite(Path(url.removeprefix("sqlite:///")))
        else:
            tables, total = measure_postgresql(url)
    per = {
        name: {
            "heap": table.heap / receipts,
            "toast": table.toast / receipts,
            "indexes": {index: size / receipts for index, size in sorted(table.indexes.items())},
            "total": table.total / receipts,
        }
        for name, table in sorted(tables.items(), key=lambda item: -item[1].total)
    }
    return {"database": kind, "rows": rows or "mix", "receipts": receipts,
            "bytes_per_receipt": total / receipts, "tables": per}  # fmt: skip


CODEC_DOCUMENTS = 2000


def documents(rows: int | None) -> list[bytes]:
    rng = random.Random(7)
    return [
        orjson.dumps(
            realistic_receipt(rng, i, rows or min(60, max(1, round(rng.expovariate(1 / 9)))))
        )
        for i in range(CODEC_DOCUMENTS)
    ]


def codecs_postgresql(url: str, docs: list[bytes]) -> dict[str, dict[str, float]]:
    """PostgreSQL's own compression of a text column: the server's CPU (its backend's, from
    /proc) per document written by COPY and per document read back whole, and the bytes of
    each document as stored, for each method; "none" is the column stored uncompressed."""
    found = {}
    texts = [doc.decode() for doc in docs]
    with psycopg.connect(url, autocommit=True) as connection:
        backend = connection.execute("SELECT pg_backend_pid()").fetchone()
        assert backend is not None
        for method in ("none", "pglz", "lz4"):
            connection.execute("DROP TABLE IF EXISTS codec_probe")
            column = "text" if method == "none" else f"text COMPRESSION {method}"
            connection.execute(f"CREATE TABLE codec_probe (id int, document {column})")
            if method == "none":
                connection.execute("ALTER TABLE codec_probe ALTER document SET STORAGE EXTERNAL")
            before = tree_cpu_seconds(backend[0])
            with (
                connection.cursor() as cursor,
                cursor.copy("COPY codec_probe (id, document) FROM STDIN") as copy,
            ):
                for index, text in enumerate(texts):
                    copy.write_row((index, text))
            written = tree_cpu_seconds(backend[0]) - before
            before = tree_cpu_seconds(backend[0])
            for _ in range(5):
                connection.execute("SELECT sum(length(document)) FROM codec_probe").fetchone()
            read = (tree_cpu_seconds(backend[0]) - before) / 5
            stored = connection.execute(
                "SELECT avg(pg_column_size(document)) FROM codec_probe"
            ).fetchone()
            assert stored is not None
            found[method] = {
                "write_us": written / len(docs) * 1e6,
                "read_us": read / len(docs) * 1e6,
                "bytes": float(stored[0]),
            }
        connection.execute("DROP TABLE codec_probe")
    return found


def codecs_sqlite(path: Path, docs: list[bytes]) -> dict[str, dict[str, float]]:
    """zstd on the document before SQLite stores it, at a few levels: this process's CPU per
    document written (compressed and inserted, a transaction per 100) and per document read
    by its id (and decompressed), and the bytes stored per document (its pages, ``dbstat``);
    "none" is the document stored as it is."""
    found = {}
    for level in (0, 1, 3):
        name = "none" if level == 0 else f"zstd {level}"
        connection = sqlite3.connect(path, isolation_level=None)
        connection.execute("DROP TABLE IF EXISTS codec_probe")
        connection.execute("CREATE TABLE codec_probe (id INTEGER PRIMARY KEY, document TEXT)")
        compressor = zstandard.ZstdCompressor(level=level) if level else None
        decompressor = zstandard.ZstdDecompressor()
        before = time.process_time()
        for first in range(0, len(docs), 100):
            connection.execute("BEGIN")
            for index in range(first, min(len(docs), first + 100)):
                doc = docs[index]
                value = compressor.compress(doc) if compressor else doc
                connection.execute("INSERT INTO codec_probe VALUES (?, ?)", (index, value))
            connection.execute("COMMIT")
        written = time.process_time() - before
        before = time.process_time()
        for _ in range(3):
            for index in range(len(docs)):
                row = connection.execute(
                    "SELECT document FROM codec_probe WHERE id = ?", (index,)
                ).fetchone()
                if compressor:
                    decompressor.decompress(row[0])
        read = (time.process_time() - before) / 3
        pages = connection.execute(
            "SELECT sum(pgsize) FROM dbstat WHERE name = 'codec_probe'"
        ).fetchone()
        connection.execute("DROP TABLE codec_probe")
        connection.close()
        found[name] = {
            "write_us": written / len(docs) * 1e6,
            "read_us": read / len(docs) * 1e6,
            "bytes": pages[0] / len(docs),
        }
    return found


def codecs(kind: str, rows: int | None, workdir: Path) -> dict[str, object]:
    docs = documents(rows)
    with new_database(kind, workdir, f"codecs_{rows or 0}") as url:
        if kind == "sqlite":
            found = codecs_sqlite(Path(url.removeprefix("sqlite:///")), docs)
        else:
            found = codecs_postgresql(url, docs)
    mean = sum(len(doc) for doc in docs) / len(docs)
    print(f"\n{kind}, {rows or 'mix'} rows: a document of {mean:,.0f} bytes stored")
    for name, figures in found.items():
        print(
            f"  {name:<6} {figures['bytes']:7,.0f} bytes   write {figures['write_us']:6.1f} µs"
            f"   read {figures['read_us']:6.1f} µs"
        )
    return {"database": kind, "rows": rows or "mix", "document_bytes": mean, "codecs": found}


def show(result: dict[str, object]) -> None:
    print(
        f"\n{result['database']}, {result['rows']} rows, {result['receipts']:,} receipts:"
        f" {result['bytes_per_receipt']:,.0f} bytes per receipt in all"
    )
    tables = result["tables"]
    assert isinstance(tables, dict)
    whole = result["bytes_per_receipt"]
    assert isinstance(whole, float)
    kept = whole - sum(tables[name]["total"] for name in TRANSIENT if name in tables)
    year = PER_DAY * 365 / 1e12
    print(
        f"  a year at {PER_DAY:,} a day: {whole * year:,.2f} TB;"
        f" {kept * year:,.2f} TB without {', '.join(TRANSIENT)} ({kept:,.0f} bytes a receipt)"
    )
    for name, table in tables.items():
        if table["total"] < 1:
            continue
        toast = f"  TOAST {table['toast']:6,.0f}" if table["toast"] >= 1 else ""
        print(f"  {name:<24} {table['total']:7,.0f}   heap {table['heap']:6,.0f}{toast}")
        for index, size in table["indexes"].items():
            if size >= 1:
                print(f"    {index:<44} {size:6,.0f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql", "both"), default="both")
    parser.add_argument("--receipts", type=int, default=100_000)
    parser.add_argument("--shapes", default="4,60", help="product rows per receipt, or mix")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument(
        "--codecs", action="store_true", help="measure the document's compression instead"
    )
    parser.add_argument("--show", type=Path, help="print the figures a --json run wrote, and stop")
    args = parser.parse_args()
    if args.show:
        for result in json.loads(args.show.read_text()):
            show(result)
        return
    kinds = ("sqlite", "postgresql") if args.database == "both" else (args.database,)
    shapes = [None if shape == "mix" else int(shape) for shape in args.shapes.split(",")]
    results = []
    with tempfile.TemporaryDirectory() as workdir:
        for kind in kinds:
            for rows in shapes:
                if args.codecs:
                    results.append(codecs(kind, rows, Path(workdir)))
                    continue
                result = measure(kind, args.receipts, rows, Path(workdir))
                show(result)
                results.append(result)
    if args.json:
        args.json.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
