"""The archive file, with no database: writing it, reading it back, and checking it.

A plain (uncompressed) tar, so that standard tools read it too:

- ``manifest.json``, first: the format and its version, the month, when and from which schema
  revision it was made, and for each table its member, its columns and their types, its row
  count and the SHA-256 of its member as stored and of its lines uncompressed;
- ``<table>.jsonl.zst`` for each table: one JSON array per row, in the manifest's column order,
  compressed with zstd (``zstd -dc receipts.jsonl.zst`` reads it). Every member is sorted by
  receipt id, so a reader walks all of them side by side, one receipt at a time, in constant
  memory (``walk``).

Values are JSON: texts as they are (a receipt's ``document`` is its stored text, byte for byte),
UUIDs as text, times as ISO 8601 in UTC, JSON columns as JSON.
"""

from __future__ import annotations

import hashlib
import io
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, cast

import orjson
import zstandard

from kuitti.archive.tables import PART_BY_NAME, PARTS, RECEIPTS, decoders
from kuitti.months import Month

FORMAT = "kuitti-archive"
FORMAT_VERSION = 1
MANIFEST = "manifest.json"
# zstd's level 9: measured on a month of bench/fill.py's receipts (bench/archive.py), it stores
# half of level 3's bytes for half as much CPU again; past it the bytes shrink slowly and the CPU
# grows fast (level 19: two thirds of the bytes for thirty times the CPU).
LEVEL = 9
CHUNK = 1 << 20


class ArchiveError(Exception):
    """The file is not a whole, readable archive of this format."""


# What reading a damaged member raises: the tar cut short, zstd's frames, a line that is not
# JSON (orjson's error is a ValueError), a value of the wrong type for its column.
_UNREADABLE = (tarfile.TarError, OSError, EOFError, zstandard.ZstdError, ValueError, TypeError)


Row = dict[str, Any]


@dataclass
class _Member:
    """One table's member while it is written: compressed into a file of its own."""

    path: Path
    file: IO[bytes]
    stream: Any  # zstandard's stream writer
    digest: Any = field(default_factory=hashlib.sha256)
    rows: int = 0
    size: int = 0


class ArchiveWriter:
    """Rows in, table by table, in any interleaving; ``finish`` writes the tar in one go and moves
    it to ``path`` (a half-written archive is never left under that name)."""

    def __init__(self, path: Path, *, level: int = LEVEL) -> None:
        self.path = path
        self.level = level
        self._dir = tempfile.TemporaryDirectory(dir=path.parent, prefix=".kuitti-archive-")
        self._members: dict[str, _Member] = {}
        for part in PARTS:
            member = Path(self._dir.name) / f"{part.name}.jsonl.zst"
            file = member.open("wb")
            stream = zstandard.ZstdCompressor(level=level).stream_writer(file, closefd=False)
            self._members[part.name] = _Member(member, file, stream)

    def write(self, name: str, rows: Iterable[Sequence[Any]]) -> None:
        """Rows of table ``name``, values in its columns' order (orjson writes UUIDs and aware
        times as text)."""
        member = self._members[name]
        for row in rows:
            line = orjson.dumps(tuple(row)) + b"\n"
            member.stream.write(line)
            member.digest.update(line)
            member.rows += 1
            member.size += len(line)

    def finish(self, header: dict[str, Any]) -> dict[str, Any]:
        """Write the archive: the manifest (``header`` plus the tables) and every member."""
        tables = {}
        for part in PARTS:
            member = self._members[part.name]
            member.stream.close()
            member.file.close()
            tables[part.name] = {
                "file": member.path.name,
                "columns": part.types,
                "rows": member.rows,
                "bytes": member.size,
                "sha256": member.digest.hexdigest(),
                "compressed_bytes": member.path.stat().st_size,
                "compressed_sha256": file_sha256(member.path),
            }
        manifest = {"format": FORMAT, "format_version": FORMAT_VERSION, **header, "tables": tables}
        text = orjson.dumps(manifest, option=orjson.OPT_INDENT_2) + b"\n"
        partial = self._partial
        with tarfile.open(partial, "w", format=tarfile.PAX_FORMAT) as tar:
            info = tarfile.TarInfo(MANIFEST)
            info.size, info.mtime, info.mode = len(text), int(time.time()), 0o644
            tar.addfile(info, io.BytesIO(text))
            for entry in tables.values():
                tar.add(Path(self._dir.name) / entry["file"], arcname=entry["file"])
        partial.replace(self.path)
        self._dir.cleanup()
        return manifest

    @property
    def _partial(self) -> Path:
        """Where the tar is written before it is moved to ``path``."""
        return self.path.with_name(f".{self.path.name}.partial")

    def abandon(self) -> None:
        """Remove every file written so far (the export failed)."""
        for member in self._members.values():
            member.file.close()
        self._partial.unlink(missing_ok=True)
        self._dir.cleanup()


def file_sha256(path: Path) -> str:
    """The SHA-256 of a file (a member while it is written, or a whole archive, which an
    operator may record beside it)."""
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


# -- reading -------------------------------------------------------------------------------------


class _Hashing:
    """A member's bytes as read, hashed on the way."""

    def __init__(self, raw: IO[bytes]) -> None:
        self.raw = raw
        self.digest = hashlib.sha256()

    def read(self, size: int = -1) -> bytes:
        data = self.raw.read(size)
        self.digest.update(data)
        return data


class ArchiveReader:
    """An archive opened for reading: its manifest, checked for shape, and its tables' rows."""

    def __init__(self, path: Path) -> None:
        try:
            self.tar = tarfile.open(path, "r:")  # noqa: SIM115  (closed by close())
        except (OSError, tarfile.TarError) as exc:
            raise ArchiveError(f"not a readable tar file: {exc}") from exc
        try:
            self.manifest = self._manifest()
        except _UNREADABLE as exc:
            self.tar.close()
            raise ArchiveError(f"cut short or damaged: {exc}") from exc
        except BaseException:
            self.tar.close()
            raise

    def __enter__(self) -> ArchiveReader:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.tar.close()

    @property
    def month(self) -> Month:
        return Month.parse(self.manifest["month"])

    def _manifest(self) -> dict[str, Any]:
        try:
            first = self.tar.next()
            file = self.tar.extractfile(first) if first is not None else None
            if first is None or first.name != MANIFEST or file is None:
                raise ArchiveError(f"the first member is not {MANIFEST}")
            manifest = orjson.loads(file.read())
        except (tarfile.TarError, orjson.JSONDecodeError) as exc:
            raise ArchiveError(f"unreadable {MANIFEST}: {exc}") from exc
        if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
            raise ArchiveError(f"not a {FORMAT} manifest")
        if manifest.get("format_version") != FORMAT_VERSION:
            raise ArchiveError(
                f"format version {manifest.get('format_version')!r}: this kuitti reads "
                f"{FORMAT_VERSION}"
            )
        try:
            Month.parse(str(manifest.get("month")))
        except ValueError as exc:
            raise ArchiveError(f"manifest: {exc}") from exc
        tables = manifest.get("tables")
        if not isinstance(tables, dict):
            raise ArchiveError("manifest: no tables")
        unknown = sorted(set(tables) - set(PART_BY_NAME))
        if unknown:
            raise ArchiveError(f"tables this kuitti does not know: {', '.join(unknown)}")
        missing = [p.name for p in PARTS if p.required and p.name not in tables]
        if missing:
            raise ArchiveError(f"tables missing: {', '.join(missing)}")
        names = set(self.tar.getnames())
        for name, entry in tables.items():
            if not isinstance(entry, dict) or entry.get("file") not in names:
                raise ArchiveError(f"{name}: its member is not in the archive")
            columns = entry.get("columns")
            if not isinstance(columns, dict) or PART_BY_NAME[name].receipt_column not in columns:
                raise ArchiveError(f"{name}: columns missing from the manifest")
        return manifest

    def columns(self, name: str) -> list[str]:
        return list(self.manifest["tables"][name]["columns"])

    def rows(self, name: str) -> Iterator[Row]:
        """The rows of table ``name`` as column -> value, each value in its Python type; the
        member's checksums and row count are checked when its last row has been read."""
        entry = self.manifest["tables"][name]
        columns = self.columns(name)
        decode = decoders(list(entry["columns"].values()))
        raw = self.tar.extractfile(entry["file"])
        if raw is None:
            raise ArchiveError(f"{name}: its member is not a file")
        hashing = _Hashing(raw)
        plain = hashlib.sha256()
        count = 0
        try:
            reader = zstandard.ZstdDecompressor().stream_reader(
                cast(IO[bytes], hashing), read_across_frames=True
            )
            for line in _lines(reader):
                plain.update(line)
                values = orjson.loads(line)
                if not isinstance(values, list) or len(values) != len(columns):
                    raise ArchiveError(f"{name}: row {count + 1} does not fit its columns")
                yield {
                    column: None if value is None else convert(value)
                    for column, convert, value in zip(columns, decode, values, strict=True)
                }
                count += 1
            while hashing.read(CHUNK):  # the tail after the last frame, if any: hashed too
                pass
        except _UNREADABLE as exc:
            raise ArchiveError(f"{name}: unreadable at row {count + 1}: {exc}") from exc
        if count != entry.get("rows"):
            raise ArchiveError(f"{name}: {count} rows, the manifest says {entry.get('rows')}")
        if plain.hexdigest() != entry.get("sha256"):
            raise ArchiveError(f"{name}: its rows do not match their SHA-256")
        if hashing.digest.hexdigest() != entry.get("compressed_sha256"):
            raise ArchiveError(f"{name}: its member does not match its SHA-256")


def _lines(reader: Any) -> Iterator[bytes]:
    """The lines of a binary stream, each with its newline."""
    rest = b""
    while chunk := reader.read(CHUNK):
        lines = (rest + chunk).split(b"\n")
        rest = lines.pop()
        for line in lines:
            yield line + b"\n"
    if rest:
        raise ArchiveError("the last row has no newline: the member is cut short")


# -- a receipt with its rows -----------------------------------------------------------------------


@dataclass
class Group:
    """One receipt and its rows of every other table."""

    receipt: Row
    rows: dict[str, list[Row]]

    @property
    def receipt_id(self) -> uuid.UUID:
        value: uuid.UUID = self.receipt[RECEIPTS.receipt_column]
        return value


class _Peek:
    def __init__(self, rows: Iterator[Row]) -> None:
        self.rows = rows
        self.head: Row | None = next(rows, None)

    def take(self) -> Row:
        assert self.head is not None
        row, self.head = self.head, next(self.rows, None)
        return row


def walk(reader: ArchiveReader) -> Iterator[Group]:
    """Every receipt with its rows, in receipt order: the members are read side by side.

    Raises ``ArchiveError`` for a member out of order, a row whose receipt is not in the
    archive, and (once a member is read to its end) a count or checksum that does not match."""
    tables = reader.manifest["tables"]
    others = {
        part.name: (part.receipt_column, _Peek(reader.rows(part.name)))
        for part in PARTS[1:]
        if part.name in tables
    }
    previous: uuid.UUID | None = None
    for receipt in reader.rows(RECEIPTS.name):
        group = Group(receipt, {name: [] for name in others})
        here = group.receipt_id
        if previous is not None and here <= previous:
            raise ArchiveError(f"{RECEIPTS.name}: not in receipt order at {here}")
        previous = here
        for name, (column, rows) in others.items():
            while rows.head is not None and rows.head[column] <= here:
                if rows.head[column] < here:
                    raise ArchiveError(
                        f"{name}: a row of receipt {rows.head[column]}, which is not in the "
                        "archive (or out of order)"
                    )
                group.rows[name].append(rows.take())
        yield group
    for name, (column, rows) in others.items():
        if rows.head is not None:
            raise ArchiveError(
                f"{name}: a row of receipt {rows.head[column]}, which is not in the archive"
            )


def verify(path: Path) -> dict[str, Any]:
    """Check an archive whole, without a database: its manifest, every member's checksums and
    row count, that every row parses into its columns, and that every row belongs to a
    receipt of the archive. ``ok`` false names the first problem."""
    report: dict[str, Any] = {"file": str(path), "ok": False}
    try:
        with ArchiveReader(path) as reader:
            report["month"] = reader.manifest["month"]
            report["schema_revision"] = reader.manifest.get("schema_revision")
            receipts = sum(1 for _ in walk(reader))
            report["tables"] = {n: e["rows"] for n, e in reader.manifest["tables"].items()}
            report["receipts"] = receipts
    except ArchiveError as exc:
        report["problem"] = str(exc)
        return report
    report["ok"] = True
    return report
