"""Archives: size and speed of a month's export, verify and restore, and the format chosen.

Run against a database filled by ``bench/fill.py`` (a year of receipts; a month is a twelfth):

    .venv/bin/python bench/fill.py sqlite:///tmp/year.db --receipts 240000 --keys year.json
    .venv/bin/python bench/archive.py sqlite:///tmp/year.db --month 2026-03
    uv run --with pyarrow .venv/bin/python bench/archive.py sqlite:///tmp/year.db --month 2026-03
    .venv/bin/python bench/archive.py sqlite:///tmp/year.db --month 2026-03 --restore

It prints, for the month:

1. ``kuitti archive export``: wall time, this process's CPU per receipt, the archive's bytes per
   receipt, against a reference measured in the same run: reading the same rows with the same
   statements and writing nothing (what the database costs alone);
2. ``verify``: CPU per receipt (decompress, hash, parse every row);
3. the format, on the archived receipts table (the bulk of the bytes): zstd JSON lines at
   levels 3, 9 and 19 against Parquet with zstd at the same levels (when ``pyarrow`` can be
   imported; ``uv run --with pyarrow`` brings it for one run without adding it to the project):
   bytes, and CPU to encode and to decode;
4. with ``--restore`` (it changes the database): the month deleted (``delete_receipts``), then
   ``restore``, CPU per receipt and its ratio to the export; then a second restore, which finds
   every receipt there and skips it.

CPU is this process's (``time.process_time``): on SQLite that includes the database; on
PostgreSQL the server's own CPU is not in it.
"""

from __future__ import annotations

import argparse
import importlib.util
import io
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import zstandard
from sqlalchemy import select

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.archive.export import BATCH, _rows_of, export_month, month_receipts  # noqa: E402
from kuitti.archive.fileformat import ArchiveReader, verify  # noqa: E402
from kuitti.archive.restore import restore  # noqa: E402
from kuitti.archive.tables import PARTS, RECEIPTS  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.months import Month  # noqa: E402
from kuitti.retention import delete_receipts  # noqa: E402

LEVELS = (3, 9, 19)


def timed(work: Callable[[], Any]) -> tuple[Any, float, float]:
    """The result, wall seconds and CPU seconds of ``work``."""
    wall, cpu = time.perf_counter(), time.process_time()
    result = work()
    return result, time.perf_counter() - wall, time.process_time() - cpu


def read_only(db: Database, month: Month) -> int:
    """The export's reads, writing nothing: the reference."""
    count = 0
    with db.engine.connect() as connection, connection.begin():
        stream = connection.execution_options(yield_per=BATCH).execute(month_receipts(month))
        for batch in stream.partitions():
            ids = [row[0] for row in batch]
            count += len(ids)
            for part in PARTS[1:]:
                _rows_of(connection, part, ids)
    return count


def per(seconds: float, count: int) -> str:
    return f"{seconds / max(count, 1) * 1e6:8.1f} µs"


def zstd_lines(lines: bytes, level: int) -> tuple[bytes, Callable[[], Any]]:
    packed = zstandard.ZstdCompressor(level=level).compress(lines)

    def decode() -> Any:
        plain = zstandard.ZstdDecompressor().decompress(packed)
        return [orjson.loads(line) for line in plain.split(b"\n") if line]

    return packed, decode


def parquet(pyarrow: Any, columns: list[str], rows: list[list[Any]], level: int) -> Any:
    """The rows as one Parquet file (zstd at ``level``), and how to read them back."""
    parquet_module = importlib.import_module("pyarrow.parquet")
    values = {c: [row[i] for row in rows] for i, c in enumerate(columns)}
    values["token_statuses"] = [orjson.dumps(v).decode() for v in values["token_statuses"]]
    out = io.BytesIO()
    parquet_module.write_table(
        pyarrow.table(values), out, compression="zstd", compression_level=level
    )
    packed = out.getvalue()
    return packed, lambda: parquet_module.read_table(io.BytesIO(packed)).to_pylist()


def formats(path: Path) -> None:
    with ArchiveReader(path) as reader:
        columns = reader.columns(RECEIPTS.name)
        rows = [
            [str(v) if isinstance(v, datetime | uuid.UUID) else v for v in row.values()]
            for row in reader.rows(RECEIPTS.name)
        ]
    lines = b"".join(orjson.dumps(row) + b"\n" for row in rows)
    print(f"\nformat, on the receipts table ({len(rows)} rows, {len(lines):,} bytes as JSON lines)")
    print(f"{'format':<24}{'bytes':>12}{'per receipt':>12}{'encode CPU':>12}{'decode CPU':>12}")
    makers: list[tuple[str, Callable[[int], tuple[bytes, Callable[[], Any]]]]] = [
        ("zstd JSON lines", lambda level: zstd_lines(lines, level))
    ]
    if importlib.util.find_spec("pyarrow") is None:
        print("(Parquet: pyarrow is not installed; 'uv run --with pyarrow' measures it too)")
    else:
        pyarrow = importlib.import_module("pyarrow")
        makers.append(("Parquet zstd", lambda level: parquet(pyarrow, columns, rows, level)))
    for name, make in makers:
        for level in LEVELS:
            (packed, decode), _, encoding = timed(lambda: make(level))  # noqa: B023
            _, _, decoding = timed(decode)
            print(
                f"{f'{name}, {level}':<24}{len(packed):>12,}{len(packed) / len(rows):>12.0f}"
                f"{encoding:>11.2f}s{decoding:>11.2f}s"
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("url", help="a database filled by bench/fill.py")
    parser.add_argument("--month", required=True, help="YYYY-MM")
    parser.add_argument("--restore", action="store_true", help="delete the month, restore it")
    args = parser.parse_args()
    db = Database(args.url.replace("postgresql://", "postgresql+psycopg://", 1), pool_size=2)
    month = Month.parse(args.month)
    with tempfile.TemporaryDirectory(prefix="kuitti-archive-bench-") as scratch:
        path = Path(scratch) / f"kuitti-{month}.tar"
        receipts, read_wall, read_cpu = timed(lambda: read_only(db, month))
        manifest, wall, cpu = timed(lambda: export_month(db, month, path, now=datetime.now(UTC)))
        size = path.stat().st_size
        print(f"{db.dialect}, month {month}: {receipts} receipts")
        for name, entry in manifest["tables"].items():
            print(f"  {name:<20}{entry['rows']:>9} rows {entry['compressed_bytes']:>12,} bytes")
        print(f"archive: {size:,} bytes, {size / receipts:.0f} bytes per receipt")
        print(f"reading alone: {read_wall:6.2f} s wall, CPU per receipt {per(read_cpu, receipts)}")
        print(
            f"export:        {wall:6.2f} s wall, CPU per receipt {per(cpu, receipts)}"
            f"  ({cpu / read_cpu:.2f} × reading alone)"
        )
        report, vwall, vcpu = timed(lambda: verify(path))
        assert report["ok"], report
        print(f"verify:        {vwall:6.2f} s wall, CPU per receipt {per(vcpu, receipts)}")
        formats(path)
        if not args.restore:
            return
        with db.engine.connect() as connection:
            ids = [
                row[0]
                for row in connection.execute(
                    month_receipts(month).with_only_columns(RECEIPTS.table.c.id)
                )
            ]
        for start in range(0, len(ids), 1000):
            with db.session() as session:
                delete_receipts(session, ids[start : start + 1000])
        outcome, rwall, rcpu = timed(lambda: restore(db, path))
        assert outcome["restored"] == receipts, outcome
        print(
            f"\nrestore:       {rwall:6.2f} s wall, CPU per receipt {per(rcpu, receipts)}"
            f"  ({rcpu / cpu:.2f} × export)"
        )
        again, awall, acpu = timed(lambda: restore(db, path))
        assert again["skipped"] == receipts, again
        print(f"again (skips): {awall:6.2f} s wall, CPU per receipt {per(acpu, receipts)}")
        with db.engine.connect() as connection:
            back = connection.execute(
                select(RECEIPTS.table.c.id).where(RECEIPTS.table.c.id.in_(ids[:1000]))
            ).all()
        assert len(back) == min(1000, len(ids))
    db.dispose()


if __name__ == "__main__":
    main()
