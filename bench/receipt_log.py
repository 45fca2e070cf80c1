"""The receipt log's cost (docs/signing.md, "Cost"), on SQLite or PostgreSQL, in one run:

- the writer's CPU per receipt (``posting.ingest.write_batch``, batches of ``--batch``) with
  the log and without it (no leaf hashes, no batch row: the writer before the log), in turns,
  and of it the leaf hashes and root of a batch (``receipt_log.enter_rows``); on PostgreSQL
  the writer's own CPU (the server's is shared with whatever else runs);
- what a hash chain per till would add instead: before its receipts are stored, the batch
  reads and locks the last hash of each of its tills (``SELECT … FOR UPDATE`` on PostgreSQL)
  and writes the new one back, in a table made for this run;
- a seal: CPU per batch sealed (``receipts.log.seal``);
- a saved receipt's proof: CPU per ``receipts.log.inclusion`` (two primary-key reads and the
  batch's tree), against rendering ``signed_json`` without it.

    .venv/bin/python bench/receipt_log.py [--database sqlite|postgresql] [--batch 25]
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import realistic_receipt  # noqa: E402  (bench/ingest.py)
from ingest_inprocess import setup  # noqa: E402  (bench/ingest_inprocess.py)
from sqlalchemy import select, text  # noqa: E402
from sqlalchemy.orm import Session  # noqa: E402

from kuitti import receipt_log, signatures  # noqa: E402
from kuitti.cli_helpers import open_services  # noqa: E402
from kuitti.db import Base, Database  # noqa: E402
from kuitti.models import Receipt, ReceiptLogBatch  # noqa: E402
from kuitti.partners.keys import holder_of_digest, key_digest  # noqa: E402
from kuitti.posting.checks import check_body  # noqa: E402
from kuitti.posting.ingest import write_batch  # noqa: E402
from kuitti.posting.service import Posting, Prepared, prepare_posting  # noqa: E402
from kuitti.receipts import log  # noqa: E402
from kuitti.security import SecretBox  # noqa: E402
from kuitti.services import Services  # noqa: E402
from kuitti.signatures import Signer  # noqa: E402

TILLS = 5  # the tills a batch's receipts come from, for the chain's figure
TURNS = 5  # with and without the log, five times each


def cpu_ms(work: Callable[[], object], times: int) -> float:
    """This thread's CPU per call of ``work``, in milliseconds."""
    started = time.thread_time()
    for _ in range(times):
        work()
    return 1000 * (time.thread_time() - started) / times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--receipts", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=25)
    args = parser.parse_args()
    rng = random.Random(20261129)
    with tempfile.TemporaryDirectory() as tmp, setup(args.database, Path(tmp)) as api_key:
        services = open_services()
        with services.db.session(write=False) as session:
            holder = holder_of_digest(session, key_digest(f"Token {api_key}"))
        assert holder is not None
        now = services.clock.now()
        key = Signer(services.db, services.settings).load(now)
        bodies = [json.dumps(realistic_receipt(rng, i, 60)).encode() for i in range(args.receipts)]
        postings = [
            prepare_posting(
                services.settings, Posting(holder, check_body(body, holder), now), body, key
            )
            for body in bodies
        ]
        batches = [postings[i : i + args.batch] for i in range(0, len(postings), args.batch)]
        write_batch(services.db, services.settings, batches[0])  # warm
        slices = [batches[1 + i :: TURNS * 2] for i in range(TURNS * 2)]
        spent = {True: [0.0, 0], False: [0.0, 0]}
        for index, part in enumerate(slices):  # with and without the log, in turns
            logged = index % 2 == 0
            with contextlib.nullcontext() if logged else without_the_log(services.db):
                started = time.thread_time()
                for batch in part:
                    write_batch(services.db, services.settings, batch)
                spent[logged][0] += time.thread_time() - started
                spent[logged][1] += sum(len(batch) for batch in part)
        writer, bare = (1000 * spent[k][0] / spent[k][1] for k in (True, False))
        added = writer - bare
        print(
            f"{args.database}, batches of {args.batch}, load average {os.getloadavg()[0]:.2f}: "
            f"the writer's CPU per receipt {writer:.3f} ms with the log, {bare:.3f} ms without "
            f"(in turns): the log adds {1000 * added:.1f} µs ({100 * added / bare:.1f} %)"
        )
        sample = postings[: args.batch]
        rows = [p.rows.rows.receipt for p in sample if p.rows is not None]
        hashing = cpu_ms(lambda: receipt_log.enter_rows(rows, now=now), 2000) / args.batch
        print(f"  of which the leaf hashes and the root: {1000 * hashing:.1f} µs")
        report_chain(services, sample, args.batch, bare)
        report_seal_and_proof(services)


def nothing_entered(_receipts: Sequence[Any], *, now: object) -> dict[str, Any]:
    return {}


@contextlib.contextmanager
def without_the_log(db: Database) -> Iterator[None]:
    """The writer as it was before the log: no leaf hashes, no batch row (for the reference)."""
    insert_rows, enter_rows = db.insert_rows, receipt_log.enter_rows

    def insert(session: Session, tables: Mapping[type[Base], Sequence[Any]]) -> None:
        insert_rows(session, {m: rows for m, rows in tables.items() if m is not ReceiptLogBatch})

    db.insert_rows = insert  # type: ignore[method-assign]
    receipt_log.enter_rows = nothing_entered  # type: ignore[assignment]
    try:
        yield
    finally:
        del db.insert_rows
        receipt_log.enter_rows = enter_rows


def report_chain(services: Services, sample: list[Prepared], size: int, writer: float) -> None:
    """A chain per till: each receipt carries the hash of the one before it at its till, so the
    batch reads (and on PostgreSQL locks) its tills' last hashes and writes them back."""
    db = services.db
    with db.session() as session:
        binary = "BLOB" if db.is_sqlite else "BYTEA"
        session.execute(text(f"CREATE TABLE bench_tills (till TEXT PRIMARY KEY, last {binary})"))
        for n in range(TILLS):
            till = {"t": f"till-{n}", "h": b"\0" * 32}
            session.execute(text("INSERT INTO bench_tills VALUES (:t, :h)"), till)
    signatures_ = [p.rows.rows.receipt["signature"] for p in sample if p.rows is not None]
    lock = "" if db.is_sqlite else " FOR UPDATE"
    tills = ", ".join(f"'till-{n}'" for n in range(TILLS))
    select_sql = f"SELECT till, last FROM bench_tills WHERE till IN ({tills}){lock}"  # noqa: S608

    def chained() -> None:
        with db.session() as session:
            db.session_rows(session, signatures._SIGNING_KID, {})
            last: dict[str, bytes] = dict(session.execute(text(select_sql)).all())
            for index, signature in enumerate(signatures_):
                till = f"till-{index % TILLS}"
                last[till] = receipt_log.leaf(signature + last[till].hex())
            session.execute(
                text("UPDATE bench_tills SET last = :h WHERE till = :t"),
                [{"t": t, "h": h} for t, h in last.items()],
            )

    def plain() -> None:
        with db.session() as session:
            db.session_rows(session, signatures._SIGNING_KID, {})

    cpu_ms(chained, 50)
    chain = max(cpu_ms(chained, 300) - cpu_ms(plain, 300), 0.0) / size
    print(
        f"  a chain per till instead ({TILLS} tills a batch): {1000 * chain:.1f} µs per receipt, "
        f"{100 * chain / writer:.2f} % of the writer's CPU, and each till's row locked from "
        "its read to the commit"
    )


def report_seal_and_proof(services: Services) -> None:
    box = SecretBox(services.settings.resolved_secret_key)
    issuer = services.settings.issuer
    with services.db.session() as session:
        started = time.thread_time()
        head = log.seal(session, box, issuer=issuer, now=services.clock.now())
        seal = 1000 * (time.thread_time() - started)
    assert head is not None
    with services.db.session(write=False) as session:
        logged = select(Receipt.id).where(Receipt.log_batch_id.is_not(None))
        ids = list(session.scalars(logged.limit(200)))
    receipt_ids = iter(ids * 10)

    def proof() -> None:
        with services.db.session(write=False) as session:
            receipt = session.get(Receipt, next(receipt_ids))
            assert receipt is not None
            assert receipt.signature is not None
            found = log.inclusion(session, receipt)
            assert found is not None
            signatures.signed_document(receipt.document.encode(), receipt.signature, found.member)

    def without() -> None:
        with services.db.session(write=False) as session:
            receipt = session.get(Receipt, next(receipt_ids))
            assert receipt is not None
            assert receipt.signature is not None
            signatures.signed_document(receipt.document.encode(), receipt.signature)

    with_proof = cpu_ms(proof, 800)
    plain = cpu_ms(without, 800)
    print(
        f"  seal: {seal:.1f} ms CPU for {head.tree_size} batches ({head.receipts} receipts), "
        f"{1000 * seal / head.tree_size:.1f} µs a batch"
    )
    print(
        f"  signed_json with its proof: {with_proof:.3f} ms CPU against {plain:.3f} ms without "
        f"(+{1000 * (with_proof - plain):.0f} µs)"
    )


if __name__ == "__main__":
    main()
