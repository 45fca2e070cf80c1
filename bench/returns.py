"""Returns benchmark: what linking a return to its purchase costs at ingest, beside a plain
receipt measured in the same run.

In one process, through the ingest service (``kuitti.posting.service.create_receipt``, the
function the POST route calls; no HTTP), on a fresh SQLite file or PostgreSQL database:

- ``purchase``: a 5-row receipt delivered by an EMAIL token to a verified user (the reference);
- ``return, no original``: a RETURN receipt naming nothing (what every return costs today);
- ``return by id``: a RETURN naming its purchase by ``originalReceiptId`` — linked, and given to
  the purchase's user (whose app connection gets a webhook row);
- ``return by number``: the same, named by ``originalReceipt`` (number and time).

Each kind runs ``--count`` times, interleaved round by round so machine noise falls on all alike.
Printed per kind: CPU per receipt (this process: the service and, on SQLite, the database) and
wall time per receipt, and both as a ratio to the purchase. On PostgreSQL the server's own CPU is
not included (see the wall ratio).

    .venv/bin/python bench/returns.py                         # SQLite, 300 of each
    .venv/bin/python bench/returns.py --database postgresql --count 500
"""

from __future__ import annotations

import argparse
import os
import secrets
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import psycopg

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.clock import FrozenClock  # noqa: E402
from kuitti.config import Settings  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.dbmigrate import upgrade  # noqa: E402
from kuitti.models import Partner, PartnerRole  # noqa: E402
from kuitti.partners.service import create_partner  # noqa: E402
from kuitti.posting.service import create_receipt  # noqa: E402
from kuitti.receipts.validation import parse_receipt_request  # noqa: E402
from kuitti.security import SecretBox  # noqa: E402
from kuitti.services import Services  # noqa: E402
from kuitti.users.service import create_user  # noqa: E402
from tests.factories import add_connection, product_row, receipt_doc  # noqa: E402

PG_ADMIN_URL = os.environ.get(
    "KUITTI_TEST_POSTGRES_URL", "postgresql://kuitti:kuitti@127.0.0.1:5432/postgres"
)
EMAIL = "maija@example.com"
KINDS = ("purchase", "return, no original", "return by id", "return by number")


@contextmanager
def database(kind: str) -> Iterator[str]:
    if kind == "sqlite":
        with tempfile.TemporaryDirectory() as directory:
            yield f"sqlite:///{directory}/kuitti.db"
        return
    name = f"kuitti_bench_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}".replace("postgresql://", "postgresql+psycopg://", 1)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def services_for(url: str, var_dir: Path) -> Services:
    db = Database(url, pool_size=2)
    upgrade(db)
    settings = Settings(
        database_url=url,
        var_dir=var_dir,
        public_url="http://127.0.0.1:8000",
        secret_key="bench-secret-key-not-for-production",
        log_level="WARNING",
    )
    clock = FrozenClock(datetime(2026, 1, 15, 12, 30, tzinfo=UTC))
    return Services(settings=settings, db=db, clock=clock)


def setup(services: Services) -> Partner:
    now = services.clock.now()
    box = SecretBox(services.settings.resolved_secret_key)
    with services.db.session() as session:
        merchant = create_partner(
            session, box, name="Kauppa Oy", roles=[PartnerRole.MERCHANT], now=now
        ).partner
        app = create_partner(
            session,
            box,
            name="Kuittisovellus",
            roles=[PartnerRole.APP],
            now=now,
            webhook_url="https://app.example/hook",
        ).partner
        user = create_user(session, EMAIL, "correct horse 1", now=now, verified=True)
        session.flush()
        add_connection(session, user.id, app.id, now=now)
    return merchant


def post(services: Services, merchant: Partner, body: dict[str, Any]) -> dict[str, Any]:
    request = parse_receipt_request(orjson.dumps(body), attachments_enabled=False)
    with services.db.session() as session:
        status, answer = create_receipt(
            session, services.settings, merchant, request, now=services.clock.now()
        )
    assert status == 200
    return answer


def bodies(n: int, original: dict[str, Any]) -> dict[str, Callable[[], dict[str, Any]]]:
    rows = [product_row(f"Tuote {i}", unit_price=100 + i) for i in range(5)]
    number = f"R-{n}"
    stamp = "2026-01-15T14:03:00+02:00"

    def purchase() -> dict[str, Any]:
        doc = receipt_doc(rows, receiptNumber=number, receiptTimeStamp=stamp)
        return {"attributes": {"tokens": [{"type": "EMAIL", "value": EMAIL}]}, "receipt": doc}

    def returned(**names: Any) -> dict[str, Any]:
        return receipt_doc(
            [product_row(quantity=-1)],
            payments=None,
            type="RETURN",
            receiptNumber=f"{number}-{len(names)}-{next(iter(names), 'none')}",
            **names,
        )

    return {
        "purchase": purchase,
        "return, no original": lambda: returned(),
        "return by id": lambda: returned(originalReceiptId=original["receipt_id"]),
        "return by number": lambda: returned(
            originalReceipt={"receiptNumber": number, "receiptTimeStamp": stamp}
        ),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--database", choices=("sqlite", "postgresql"), default="sqlite")
    parser.add_argument("--count", type=int, default=300)
    args = parser.parse_args()
    cpu: dict[str, list[float]] = {k: [] for k in KINDS}
    wall: dict[str, list[float]] = {k: [] for k in KINDS}
    with database(args.database) as url, tempfile.TemporaryDirectory() as var_dir:
        services = services_for(url, Path(var_dir))
        merchant = setup(services)
        for n in range(-10, args.count):  # ten rounds of warm-up
            original: dict[str, Any] = {}
            for kind, make in bodies(n, original).items():
                body = make()
                cpu_start, wall_start = time.process_time(), time.perf_counter()
                answer = post(services, merchant, body)
                cpu_used = time.process_time() - cpu_start
                wall_used = time.perf_counter() - wall_start
                if kind == "purchase":
                    original.update(answer)
                else:
                    expected = None if kind == "return, no original" else "linked"
                    assert answer.get("original", {}).get("status") == expected, answer
                if n >= 0:
                    cpu[kind].append(cpu_used)
                    wall[kind].append(wall_used)
        services.db.dispose()
    print(f"database: {args.database}, {args.count} receipts of each kind, interleaved")
    reference_cpu = statistics.mean(cpu["purchase"])
    reference_wall = statistics.median(wall["purchase"])
    print(f"{'kind':<22} {'CPU ms':>8} {'ratio':>6} {'wall p50 ms':>12} {'ratio':>6}")
    for kind in KINDS:
        mean_cpu = statistics.mean(cpu[kind])
        median_wall = statistics.median(wall[kind])
        print(
            f"{kind:<22} {mean_cpu * 1000:8.2f} {mean_cpu / reference_cpu:6.2f} "
            f"{median_wall * 1000:12.2f} {median_wall / reference_wall:6.2f}"
        )


if __name__ == "__main__":
    main()
