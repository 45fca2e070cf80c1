"""The ingest writer alone: CPU per receipt of ``posting.ingest.write_batch`` (one transaction
for a batch of validated posts) on SQLite or PostgreSQL, with no HTTP and no validation in the
figure, and where that CPU goes.

It validates the receipts of ``bench/ingest.py`` (60 rows, a CARD payment) and builds their rows
once, as the event loop does (``posting.service.prepare_posting``), then stores them in batches
of ``--batch`` as the writer thread does, and prints the writer's CPU per receipt (this
thread's own CPU: the Python side and, on SQLite, the database engine, which runs in-process;
on PostgreSQL the server's own CPU, its backends of the bench's database and its shared
processes, is printed beside it) and, with ``--profile``, cProfile's top functions.

    .venv/bin/python bench/write_batch.py [--database sqlite|postgresql] [--batch 25] [--profile]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import random
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import OUR_DATABASES, postgres_cpu_seconds, realistic_receipt  # noqa: E402  (bench/ingest.py)
from ingest_inprocess import setup  # noqa: E402  (bench/ingest_inprocess.py)

from kuitti.cli_helpers import open_services  # noqa: E402
from kuitti.partners.keys import holder_of_digest, key_digest  # noqa: E402
from kuitti.posting.checks import check_body  # noqa: E402
from kuitti.posting.ingest import write_batch  # noqa: E402
from kuitti.posting.service import Posting, prepare_posting  # noqa: E402
from kuitti.signatures import Signer  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="sqlite")
    parser.add_argument("--receipts", type=int, default=3000)
    parser.add_argument("--batch", type=int, default=25)
    parser.add_argument("--profile", action="store_true")
    args = parser.parse_args()
    rng = random.Random(20260115)
    with tempfile.TemporaryDirectory() as tmp, setup(args.database, Path(tmp)) as api_key:
        services = open_services()
        digest = key_digest(f"Token {api_key}")
        with services.db.session(write=False) as session:
            holder = holder_of_digest(session, digest)
        assert holder is not None
        now = services.clock.now()
        key = Signer(services.db, services.settings).load(now)
        bodies = [
            json.dumps(realistic_receipt(rng, i, 60)).encode() for i in range(args.receipts + 200)
        ]
        # Validated and prepared as the event loop does, before the writer takes them.
        postings = [
            prepare_posting(
                services.settings, Posting(holder, check_body(body, holder), now), body, key
            )
            for body in bodies
        ]
        batches = [postings[i : i + args.batch] for i in range(0, len(postings), args.batch)]
        warm, measured = batches[: 200 // args.batch], batches[200 // args.batch :]
        for batch in warm:
            write_batch(services.db, services.settings, batch)
        profiler = cProfile.Profile() if args.profile else None
        stored = sum(len(b) for b in measured)
        started, cpu, server = (
            time.perf_counter(),
            time.thread_time(),
            postgres_cpu_seconds(OUR_DATABASES),
        )
        if profiler:
            profiler.enable()
        for batch in measured:
            outcomes = write_batch(services.db, services.settings, batch)
            assert all(o.answer is not None for o in outcomes), outcomes[0]
        if profiler:
            profiler.disable()
        per_receipt = 1000 * (time.thread_time() - cpu) / stored
        server_per_receipt = 1000 * (postgres_cpu_seconds(OUR_DATABASES) - server) / stored
        wall = 1000 * (time.perf_counter() - started) / stored
    print(
        f"{args.database}: {stored} receipts in batches of {args.batch}: writer CPU "
        f"{per_receipt:.3f} ms per receipt"
        + (f", PostgreSQL's {server_per_receipt:.3f}" if args.database == "postgresql" else "")
        + f" (wall {wall:.3f} ms); load average "
        f"{os.getloadavg()[0]:.2f}"
    )
    if profiler:
        pstats.Stats(profiler).sort_stats(os.environ.get("SORT", "tottime")).print_stats(
            int(os.environ.get("TOP", "25"))
        )


if __name__ == "__main__":
    main()
