"""What an uncached partner-key lookup costs, next to the validation every create request does.

kuitti looks the API key up in the database on every request (no per-process cache: a cache
would keep accepting a key rotated or disabled from another process). This prints the lookup's
wall and CPU time per call and its ratio to validating one receipt, both measured in this run.

    .venv/bin/python bench/partner_lookup.py                       # SQLite in a temp dir
    KUITTI_DATABASE_URL=postgresql://… .venv/bin/python bench/partner_lookup.py
"""

from __future__ import annotations

import os
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime

import orjson

from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.models import PartnerRole
from kuitti.partners.keys import holder_of_digest
from kuitti.partners.service import create_partner
from kuitti.receipts.validation import parse_receipt_request
from kuitti.security import SecretBox, hash_secret
from tests.factories import many_rows, receipt_doc

ROUNDS = 2000


def measure(work: Callable[[], object]) -> tuple[float, float]:
    """Microseconds of wall and CPU time per call."""
    for _ in range(50):
        work()
    wall, cpu = time.perf_counter(), time.process_time()
    for _ in range(ROUNDS):
        work()
    return (
        (time.perf_counter() - wall) / ROUNDS * 1e6,
        (time.process_time() - cpu) / ROUNDS * 1e6,
    )


def main() -> None:
    url = os.environ.get("KUITTI_DATABASE_URL")
    with tempfile.TemporaryDirectory() as tmp:
        db = Database(url or f"sqlite:///{tmp}/bench.db", pool_size=2)
        upgrade(db)
        with db.session() as session:
            created = create_partner(
                session,
                SecretBox("bench-secret"),
                name=f"Bench {time.time_ns()}",
                roles=[PartnerRole.MERCHANT],
                now=datetime.now(UTC),
            )
        digest = hash_secret(created.api_key)

        def lookup() -> object:
            with db.session(write=False) as session:
                return holder_of_digest(session, digest)

        body = orjson.dumps(receipt_doc(many_rows(5)))

        def validate() -> object:
            return parse_receipt_request(body, attachments_enabled=False)

        lookup_wall, lookup_cpu = measure(lookup)
        validate_wall, validate_cpu = measure(validate)
        db.dispose()
    print(f"backend: {db.dialect}, {ROUNDS} calls each")
    print(f"key lookup:        {lookup_wall:8.1f} µs wall, {lookup_cpu:8.1f} µs CPU per call")
    print(f"receipt validation:{validate_wall:8.1f} µs wall, {validate_cpu:8.1f} µs CPU per call")
    print(f"lookup / validation: {lookup_wall / validate_wall:.2f} (wall)")


if __name__ == "__main__":
    main()
