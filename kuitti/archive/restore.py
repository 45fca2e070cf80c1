"""Restore: a month from an archive back into the database, so that its receipts read exactly
as before (the same stored documents, links, grants, deliveries and card matches).

In three steps:

1. the file is verified whole (``fileformat.verify``) and its tables' columns are compared with
   the database's: an archive from another schema revision restores when every column it has
   is still there, and every column it lacks may be left empty or to its default;
2. a read-only pass checks every batch as step 3 will (``_check``): what the rows name outside
   the archive (partners, namespaces, users, connections, cards, card purchases) must be in
   the database, and no link or card purchase may have been taken by another receipt since.
   Any problem refuses the restore before anything is written;
3. batch by batch, one transaction each, the same check and then the inserts.

A receipt already in the database is skipped with all of its rows, so restoring twice adds
nothing, and a restore stopped half-way is finished by running it again. A return whose
original is in neither the archive nor the database comes back without the link to it
(``originals_unlinked``): its document still names the purchase.
"""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import bindparam, insert, select, tuple_, update
from sqlalchemy.orm import Session

from kuitti.archive.fileformat import ArchiveError, ArchiveReader, Group, Row, verify, walk
from kuitti.archive.tables import PART_BY_NAME, PARTS, RECEIPTS, type_name
from kuitti.db import Database, table
from kuitti.models import CardMatch, CardPurchase, ReceiptLink
from kuitti.months import Month
from kuitti.partitions import ensure_month_partitions

BATCH = 500
MAX_PROBLEMS = 20
# Tables an archive brings its own rows of: a reference to them points inside the archive.
INSIDE = frozenset({RECEIPTS.name, PART_BY_NAME["card_payments"].name})


class RestoreRefused(Exception):
    """The archive cannot be restored into this database; nothing of the batch was written."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("; ".join(problems))
        self.problems = problems


@dataclass
class _Plan:
    """What one batch would write."""

    new: list[Group]
    skipped: int
    unlinked: set[uuid.UUID] = field(default_factory=set)
    problems: list[str] = field(default_factory=list)


def _batches(groups: Iterable[Group], size: int) -> Iterator[list[Group]]:
    iterator = iter(groups)
    while batch := list(itertools.islice(iterator, size)):
        yield batch


def _rows(groups: list[Group], name: str) -> list[Row]:
    if name == RECEIPTS.name:
        return [group.receipt for group in groups]
    # An optional table (signatures) that an older archive lacks has no rows.
    return [row for group in groups for row in group.rows.get(name, [])]


def _present(session: Session, values: set[Any], *columns: Any) -> set[Any]:
    """Which of ``values`` are in ``columns`` (one column: values; several: tuples of values),
    a thousand at a time."""
    key = columns[0] if len(columns) == 1 else tuple_(*columns)
    found: set[Any] = set()
    ordered = sorted(values, key=str)
    for start in range(0, len(ordered), 1000):
        rows = session.execute(select(*columns).where(key.in_(ordered[start : start + 1000])))
        found.update(row[0] if len(columns) == 1 else tuple(row) for row in rows)
    return found


def _check(session: Session, groups: list[Group]) -> _Plan:
    ids = {group.receipt_id for group in groups}
    there = _present(session, ids, RECEIPTS.table.c.id)
    plan = _Plan([g for g in groups if g.receipt_id not in there], len(there))
    for part in PARTS:
        rows = _rows(plan.new, part.name)
        for key in part.table.foreign_keys:
            name, target = key.parent.name, key.column
            values = {row[name] for row in rows if row.get(name) is not None}
            if not values or (target.table.name in INSIDE and name != "original_receipt_id"):
                continue
            absent = values - _present(session, values, target)
            if name == "original_receipt_id":  # a return's purchase: kept only when it is there
                plan.unlinked |= absent - ids
            elif absent:
                plan.problems.append(
                    f"{part.name}.{name}: {len(absent)} of the {target.table.name} it names "
                    f"are not in the database (one: {min(absent, key=str)})"
                )
    links = {(r["namespace"], r["identifier"]) for r in _rows(plan.new, ReceiptLink.__tablename__)}
    taken = _present(session, links, ReceiptLink.namespace, ReceiptLink.identifier)
    if taken:
        plan.problems.append(
            f"receipt_links: {len(taken)} link(s) belong to other receipts now "
            f"(one: {'/'.join(min(taken))})"
        )
    purchases = {
        r["purchase_id"]
        for r in _rows(plan.new, CardMatch.__tablename__)
        if r["purchase_id"] is not None
    }
    if purchases:
        matched = _present(session, purchases, CardMatch.purchase_id)
        if matched:
            plan.problems.append(
                f"card_matches: {len(matched)} card purchase(s) are matched to other payments "
                f"now (one: {min(matched, key=str)})"
            )
    return plan


def _write(session: Session, plan: _Plan, columns: dict[str, list[str]]) -> dict[str, int]:
    written = {}
    for part in PARTS:
        if part.name not in columns:
            continue
        rows = [{c: row[c] for c in columns[part.name]} for row in _rows(plan.new, part.name)]
        if part is RECEIPTS:
            for row in rows:
                if row["original_receipt_id"] in plan.unlinked:
                    row["original_receipt_id"] = None
        if rows:
            session.execute(insert(part.table), rows)
        written[part.name] = len(rows)
    # The purchases the matches took, freed when the month was deleted.
    purchases = table(CardPurchase)
    taken = [
        {"purchase": row["purchase_id"], "payment": row["payment_id"]}
        for row in _rows(plan.new, CardMatch.__tablename__)
        if row["purchase_id"] is not None
    ]
    if taken:
        session.execute(
            update(purchases)
            .where(purchases.c.id == bindparam("purchase"), purchases.c.payment_id.is_(None))
            .values(payment_id=bindparam("payment")),
            taken,
        )
    return written


def _schema_problems(reader: ArchiveReader) -> list[str]:
    """How the archive's tables do not fit the database's (``kuitti.models``, at head)."""
    problems = []
    for name, entry in reader.manifest["tables"].items():
        current = {c.name: c for c in PART_BY_NAME[name].table.columns}
        archived = entry["columns"]
        for column, kind in archived.items():
            if column not in current:
                problems.append(f"{name}.{column}: no such column in the database")
            elif type_name(current[column]) != kind:
                problems.append(f"{name}.{column}: {kind} in the archive, not in the database")
        for column in current.values():
            defaulted = column.default is not None or column.server_default is not None
            if column.name not in archived and not (column.nullable or defaulted):
                problems.append(f"{name}.{column.name}: not in the archive, and it needs a value")
    return problems


def ensure_partitions(session: Session, groups: list[Group], made: set[Month]) -> None:
    """The partitions that the batch's rows go to, made before they go in (PostgreSQL; a
    no-op on SQLite). A row's partition is its ingest month (``Month.of_id``: the month its id,
    or its receipt's, was made in), which a dropped month's archive brings back, whatever the
    receipt month the archive holds; ``made`` holds the months already seen."""
    ids = [group.receipt_id for group in groups]
    ids += [row["id"] for group in groups for row in group.rows.get("receipt_grants", [])]
    for month in {Month.of_id(row_id) for row_id in ids} - made:
        ensure_month_partitions(session, month)
        made.add(month)


def restore(db: Database, path: Path, *, batch: int = BATCH) -> dict[str, Any]:
    """Bring the archive's month back; what was restored and what was already there.
    ``ArchiveError``: the file is not a whole archive. ``RestoreRefused``: it does not fit this
    database; the batches written before a refusal found during the writes stay."""
    checked = verify(path)
    if not checked["ok"]:
        raise ArchiveError(checked["problem"])
    with ArchiveReader(path) as reader:
        month = reader.month
        columns = {name: reader.columns(name) for name in reader.manifest["tables"]}
        problems = _schema_problems(reader)
    if problems:
        raise RestoreRefused(problems[:MAX_PROBLEMS])
    with ArchiveReader(path) as reader, db.session(write=False) as session:
        for groups in _batches(walk(reader), batch):
            problems += _check(session, groups).problems
            if len(problems) >= MAX_PROBLEMS:
                break
    if problems:
        raise RestoreRefused(problems[:MAX_PROBLEMS])
    made: set[Month] = set()
    outcome: dict[str, Any] = {
        "month": str(month),
        "restored": 0,
        "skipped": 0,
        "originals_unlinked": 0,
        "rows": dict.fromkeys(columns, 0),
    }
    with ArchiveReader(path) as reader:
        for groups in _batches(walk(reader), batch):
            with db.session() as session:
                plan = _check(session, groups)
                if plan.problems:
                    raise RestoreRefused(plan.problems)
                ensure_partitions(session, plan.new, made)
                for name, count in _write(session, plan, columns).items():
                    outcome["rows"][name] += count
            outcome["restored"] += len(plan.new)
            outcome["skipped"] += plan.skipped
            outcome["originals_unlinked"] += len(plan.unlinked)
    return outcome
