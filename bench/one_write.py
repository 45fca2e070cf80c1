"""What a post that delivers through a token writes: statements, ``UPDATE``s of ``receipts`` and
WAL bytes per post, and its CPU, for this tree's kuitti and for other trees' beside it, in turns.

In one process per tree (this tree's copy of ``kuitti`` and ``tests``, or ``--beside``'s), each
on its own fresh database, through the ingest service (``kuitti.posting.service.
create_receipt``, the function the POST route calls; no HTTP): a 5-row receipt with a ``CARD``
token naming a card enrolled for a verified user, and one with an ``EMAIL`` token to that user
(delivered; the user's app connection gets a grant and a webhook row). Every round runs
``--count`` posts of each kind in each tree, one tree after the other.

Printed per tree and kind: SQL statements and ``UPDATE receipts`` per post (counted on the
engine), WAL bytes per post (``pg_current_wal_lsn()`` before and after the round, PostgreSQL
only: the cluster's, so other work on it adds; the least of the rounds is the post's own
figure, the median says how much others added), this process's CPU per post (the service
and, on SQLite, the database; not the PostgreSQL server's), and each as a ratio to the first
tree's. The load average is printed before and after.

    .venv/bin/python bench/one_write.py --database postgresql --beside ../kuitti-before
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from datetime import timedelta
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
KINDS = ("CARD", "EMAIL")
PAN = "415301******1234"


def child(tree: Path, kind: str) -> None:
    """Serve rounds on stdin (one line: a count) for ``tree``'s kuitti; a JSON line each."""
    sys.path.insert(0, str(tree))
    from sqlalchemy import event, select, text

    from kuitti.models import Card, PartnerRole, User
    from kuitti.partners.service import create_partner
    from kuitti.security import SecretBox
    from tests.factories import product_row, receipt_doc

    # bench/returns.py, after the tree's kuitti: it puts this tree first on the path.
    bench = importlib.import_module("returns")

    with bench.database(kind) as url, tempfile.TemporaryDirectory() as var_dir:
        services = bench.services_for(url, Path(var_dir))
        merchant = bench.setup(services)
        now = services.clock.now()
        with services.db.session() as session:
            issuer = create_partner(
                session,
                SecretBox(services.settings.resolved_secret_key),
                name="Pankki Oyj",
                roles=[PartnerRole.CARD_ISSUER],
                now=now,
            ).partner
            user = session.scalars(select(User).where(User.email == bench.EMAIL)).one()
            session.add(
                Card(
                    id=uuid.uuid4(),
                    partner_id=issuer.id,
                    partner_card_id="card-1",
                    masked_pan=PAN,
                    pan_first6=PAN[:6],
                    pan_last4=PAN[-4:],
                    exp_date=now + timedelta(days=800),
                    user_id=user.id,
                    holder_name=None,
                    pilot=False,
                    created_at=now,
                    deleted_at=None,
                )
            )
        tokens = {
            "CARD": {"type": "CARD", "id": "card-1", "value": PAN},
            "EMAIL": {"type": "EMAIL", "value": bench.EMAIL},
        }
        statements: list[str] = []

        def seen(_conn: object, _cursor: object, statement: str, *_: object) -> None:
            statements.append(statement)

        event.listen(services.db.engine, "before_cursor_execute", seen)

        def wal_lsn() -> str:
            with services.db.engine.connect() as connection:
                return str(connection.execute(text("SELECT pg_current_wal_lsn()")).scalar())

        def wal_since(start: str) -> int:
            with services.db.engine.connect() as connection:
                query = text("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), :start)")
                return int(connection.execute(query, {"start": start}).scalar() or 0)

        serial = 0
        rows = [product_row(f"Tuote {i}", unit_price=100 + i) for i in range(5)]
        print("ready", flush=True)
        for line in sys.stdin:
            count = int(line)
            figures: dict[str, dict[str, float]] = {}
            for token_kind in KINDS:
                bodies = []
                for _ in range(count):
                    serial += 1
                    doc = receipt_doc(rows, receiptNumber=f"R-{serial}")
                    bodies.append({"attributes": {"tokens": [tokens[token_kind]]}, "receipt": doc})
                start = wal_lsn() if kind == "postgresql" else ""
                statements.clear()
                cpu = time.process_time()
                for body in bodies:
                    answer = bench.post(services, merchant, body)
                    assert answer["tokens"] == [{"type": token_kind, "status": "delivered"}]
                cpu = time.process_time() - cpu
                counted = list(statements)
                wal = wal_since(start) if kind == "postgresql" else 0
                updates = sum(1 for s in counted if s.startswith("UPDATE receipts "))
                figures[token_kind] = {
                    "statements": len(counted) / count,
                    "updates": updates / count,
                    "wal": wal / count,
                    "cpu_ms": cpu * 1000 / count,
                }
            print(json.dumps(figures), flush=True)
        services.db.dispose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--beside", action="append", default=[], help="another tree's root")
    parser.add_argument("--count", type=int, default=100, help="posts of each kind a round")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(Path(args.child), args.database)
        return
    trees = [ROOT, *(Path(t).resolve() for t in args.beside)]
    env = {**os.environ, "KUITTI_LOG_LEVEL": "WARNING"}
    children = [
        subprocess.Popen(
            [sys.executable, __file__, "--database", args.database, "--child", str(tree)],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        for tree in trees
    ]
    for process in children:
        assert process.stdout is not None
        assert process.stdout.readline().strip() == "ready"
    print(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    rounds: list[list[dict[str, dict[str, float]]]] = [[] for _ in trees]
    for n in range(args.rounds + 1):  # the first round warms up
        for i, process in enumerate(children):
            assert process.stdin is not None
            assert process.stdout is not None
            process.stdin.write(f"{args.count}\n")
            process.stdin.flush()
            figures = json.loads(process.stdout.readline())
            if n:
                rounds[i].append(figures)
    for process in children:
        assert process.stdin is not None
        process.stdin.close()
        process.wait()
    print(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    print(
        f"database: {args.database}; {args.rounds} rounds of {args.count} posts of each kind "
        "in each tree, in turns; ratio: against the first tree"
    )
    header = f"{'tree':<12} {'kind':<6} {'statements':>10} {'UPDATE receipts':>15}"
    print(f"{header} {'WAL B least':>11} {'median':>7} {'ratio':>6} {'CPU ms':>7} {'ratio':>6}")
    summary: dict[str, dict[str, float]] = {}

    def wal_columns(i: int, kind: str) -> str:
        if args.database != "postgresql":
            return f"{'-':>11} {'-':>7} {'-':>6}"
        least = min(r[kind]["wal"] for r in rounds[i])
        median = statistics.median(r[kind]["wal"] for r in rounds[i])
        return f"{least:11.0f} {median:7.0f} {least / summary[kind]['wal']:6.2f}"

    for i, tree in enumerate(trees):
        for kind in KINDS:
            least = min(r[kind]["wal"] for r in rounds[i])
            cpu = statistics.median(r[kind]["cpu_ms"] for r in rounds[i])
            first = summary.setdefault(kind, {"wal": least, "cpu": cpu})
            print(
                f"{tree.name[:12]:<12} {kind:<6} {rounds[i][0][kind]['statements']:10.1f} "
                f"{rounds[i][0][kind]['updates']:15.2f} {wal_columns(i, kind)} {cpu:7.2f} "
                f"{cpu / first['cpu']:6.2f}"
            )


if __name__ == "__main__":
    main()
