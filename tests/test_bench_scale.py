"""``bench/scale.py``'s delete cases on tiny fills, both databases: a run of ``--only
retire,delete`` prints each turn's figures and the summary, and a ``retire`` turn deletes exactly
the oldest production receipts it was asked for, through retention's own deletes, measured (on
SQLite ``--cold``: out of the cache first, so the turn read from storage)."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

import pytest
from sqlalchemy import select

from kuitti.clock import as_utc
from kuitti.db import Database
from kuitti.models import Partner, ReceiptGrant
from kuitti.models.receipts import GrantReason
from tests.conftest import BACKEND

BENCH = Path(__file__).resolve().parent.parent / "bench"
COLD = ["--cold"] if BACKEND == "sqlite" else []
TURN = re.compile(
    r"round 1 (?P<kind>delete|retire) +(?P<label>small|full) +(?P<rate>\d+)/s +slowest batch"
    r" (?P<slowest>\d+) ms, longest write (?P<write>\d+) ms \((?P<deleted>\d+) receipts,"
    r" (?P<pages>[\d.]+) pages read and (?P<cpu>[\d.]+) ms CPU a receipt"
)


@pytest.fixture
def scale(monkeypatch: pytest.MonkeyPatch) -> tuple[ModuleType, ModuleType]:
    monkeypatch.syspath_prepend(BENCH)
    import fill  # bench/fill.py
    import scale  # bench/scale.py

    return sys.modules[fill.__name__], sys.modules[scale.__name__]


@pytest.fixture
def url(scale: tuple[ModuleType, ModuleType], tmp_path: Path) -> Iterator[str]:
    """A new database of the backend's, made and dropped by the bench's own ``new_database``."""
    with scale[1].new_database(BACKEND, tmp_path, "filled") as made:
        yield made


def test_a_delete_run_prints_every_turns_figures() -> None:
    command = [sys.executable, str(BENCH / "scale.py"), "--database", BACKEND, "--small", "400"]
    command += ["--receipts", "2000", "--rounds", "1", "--delete-receipts", "60"]
    command += ["--only", "retire,delete", *COLD]
    out = subprocess.run(command, check=True, capture_output=True, text=True, timeout=300).stdout

    turns = {(m["kind"], m["label"]): m for m in TURN.finditer(out)}
    assert set(turns) == {(k, label) for k in ("delete", "retire") for label in ("small", "full")}
    for (kind, _), turn in turns.items():
        assert int(turn["deleted"]) == 60 if kind == "retire" else int(turn["deleted"]) > 0
        assert int(turn["rate"]) > 0
        assert int(turn["slowest"]) >= int(turn["write"])
        assert float(turn["cpu"]) > 0
    assert re.search(r"^retire \(slowest batch\) +\d+ +\d+ +\d+ +\d+ +[\d.]+ +[\d.]+$", out, re.M)
    assert re.search(r"^delete \(slowest batch\) ", out, re.M)
    assert out.count("longest write transaction: small") == 2
    if COLD:
        assert out.count("MiB left in cache") == 4


def test_a_retire_turn_deletes_the_oldest_production_receipts(
    scale: tuple[ModuleType, ModuleType], url: str, tmp_path: Path
) -> None:
    fill, bench = scale
    db_url = bench.sqlalchemy_url(url)
    fill.fill(db_url, 300, datetime.now(UTC) - timedelta(days=1), 5)
    db = Database(db_url)

    def posted(sandbox: bool) -> list[datetime]:
        with db.session(write=False) as session:
            times = session.scalars(
                select(ReceiptGrant.receipt_time)
                .join(Partner, Partner.id == ReceiptGrant.partner_id)
                .where(Partner.sandbox.is_(sandbox), ReceiptGrant.reason == GrantReason.POSTED)
            )
            return sorted(as_utc(t) for t in times)

    try:
        production, sandbox = posted(False), posted(True)
        turn = bench.retire_turn(bench.Instance("full", url, {}), 40, tmp_path, bool(COLD))

        assert turn.deleted == 40
        assert posted(False) == production[40:]
        assert posted(True) == sandbox
    finally:
        db.dispose()
    assert turn.rate > 0
    assert turn.slowest_ms >= turn.longest_write_ms > 0
    assert turn.cpu_ms > 0
    assert turn.pages_per_receipt is not None
    if COLD and turn.resident == 0:  # the file was put out of the cache: the turn read it
        assert turn.pages_per_receipt > 0
