"""Webhook worker CPU in-process: the worker's own functions called directly, so the CPU it
prints (``time.process_time``, every thread of this process) is the worker's, whatever else the
machine runs. Receivers are the raw HTTP/1.1 servers of ``bench/webhooks.py``, in a subprocess.

Two parts:

* bookkeeping — batches of ``--batch`` events are queued (not timed), then each batch is claimed
  and the previous batch's outcomes recorded, in two ways alternated batch by batch so both
  share the machine's noise: *separate* (``record_outcomes``, then the claim's read and leasing
  transactions: the worker before the two were folded) and *folded* (one ``_claim_due`` call
  that records and claims in one transaction: what the pipeline does now). The outcomes are
  made up (a 200 each), so no HTTP is involved.
* sending — ``send`` of ``--sends`` claims to the receivers, ``--concurrency`` at a time, on
  uvloop: the HTTP call, the signature, the metrics and the log line (filtered at ERROR, as the
  benchmark's workers log); and the signed headers alone.

    .venv/bin/python bench/webhooks_inprocess.py [--database postgresql|sqlite] [--batch 20]
        [--batches 200] [--sends 5000] [--concurrency 32]
    .venv/bin/py-spy record --gil --format raw -o profile.txt -- \\
        .venv/bin/python bench/webhooks_inprocess.py          # where the CPU goes
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import platform
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import uvloop

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from webhooks import (  # noqa: E402  (bench/webhooks.py)
    _drop_postgres,
    _env,
    _readline,
    _scratch_postgres,
    bench_partners,
    bench_services,
    start_receivers,
    stop_receivers,
)

from kuitti.logs import configure_logging  # noqa: E402
from kuitti.models import Partner  # noqa: E402
from kuitti.services import Services  # noqa: E402
from kuitti.webhooks.events import enqueue  # noqa: E402
from kuitti.webhooks.payloads import ReceiptNotification  # noqa: E402
from kuitti.webhooks.signing import webhook_headers  # noqa: E402
from kuitti.webhooks.ssrf import TargetGuard  # noqa: E402
from kuitti.webhooks.worker import (  # noqa: E402
    MAX_IN_FLIGHT_PER_PARTNER,
    Claim,
    Outcome,
    _claim_due,
    make_client,
    record_outcomes,
    send,
)


def queue_events(services: Services, partners: list[Partner], count: int) -> None:
    with services.db.session() as session:
        for i in range(count):
            payload = ReceiptNotification(service_id=uuid.uuid4(), receipt_id=uuid.uuid4())
            enqueue(session, partners[i % len(partners)], payload, now=services.clock.now())


def answered(services: Services, claims: list[Claim]) -> list[Outcome]:
    now = services.clock.now()
    return [Outcome(claim, now, now, 200, 1, None) for claim in claims]


def claim(services: Services, batch: int, finished: list[Outcome]) -> list[Claim]:
    claims, _more = _claim_due(
        services,
        limit=batch,
        busy={},
        per_partner=MAX_IN_FLIGHT_PER_PARTNER * 4,
        finished=finished,
    )
    return claims


def bookkeeping(
    services: Services, partners: list[Partner], batch: int, batches: int
) -> dict[str, float]:
    """CPU per batch of the two ways, alternated; returns ms per delivery for each."""
    cpu = {"separate": 0.0, "folded": 0.0}
    pending: dict[str, list[Outcome]] = {"separate": [], "folded": []}
    claimed = {"separate": 0, "folded": 0}
    for i in range(batches * 2):
        way = "separate" if i % 2 == 0 else "folded"
        queue_events(services, partners, batch)
        started = time.process_time()
        if way == "separate":
            record_outcomes(services, pending[way])
            claims = claim(services, batch, [])
        else:
            claims = claim(services, batch, pending[way])
        cpu[way] += time.process_time() - started
        claimed[way] += len(claims)
        pending[way] = answered(services, claims)
    return {way: cpu[way] / claimed[way] * 1000 for way in cpu}


def sending(
    services: Services, partners: list[Partner], sends: int, concurrency: int
) -> dict[str, float]:
    """CPU per ``send`` (real HTTP to the receivers) and per set of signed headers."""
    queue_events(services, partners, sends)
    claims: list[Claim] = []
    while len(claims) < sends:
        claims += claim(services, 256, [])

    async def main() -> float:
        guard = TargetGuard(allow_insecure=True)
        async with make_client(services.settings) as client:
            await asyncio.gather(*(send(services, client, c, guard) for c in claims[:concurrency]))
            started = time.process_time()
            for at in range(0, len(claims), concurrency):
                chunk = claims[at : at + concurrency]
                outcomes = await asyncio.gather(*(send(services, client, c, guard) for c in chunk))
                assert all(o.ok for o in outcomes), outcomes[0].error
            return time.process_time() - started

    send_cpu = uvloop.run(main())
    one = claims[0]
    assert one.webhook_key is not None
    key = one.webhook_key
    headers_cpu = cpu_of(
        lambda: webhook_headers(key, one.webhook_id, 1, one.body, bare_authorization=False),
        20_000,
    )
    return {"send": send_cpu / len(claims) * 1000, "signed headers": headers_cpu * 1000}


def cpu_of(step: Callable[[], object], times: int) -> float:
    started = time.process_time()
    for _ in range(times):
        step()
    return (time.process_time() - started) / times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--database", choices=["sqlite", "postgresql"], default="postgresql")
    parser.add_argument("--batch", type=int, action="append", help="Events per claim (20).")
    parser.add_argument("--batches", type=int, default=200, help="Claims of each way.")
    parser.add_argument("--sends", type=int, default=5000)
    parser.add_argument("--concurrency", type=int, default=32)
    args = parser.parse_args()
    print(f"load average at start: {os.getloadavg()}")
    print(
        f"machine: {os.cpu_count()} cores, {platform.machine()}, Python {platform.python_version()}"
    )
    scratch: str | None = None
    if args.database == "sqlite":
        url = f"sqlite:///{tempfile.mkdtemp(prefix='kuitti-bench-db-')}/bench.db"
    else:
        url, scratch = _scratch_postgres()
    services, var_dir = bench_services(url)
    configure_logging("ERROR", json=True)
    receivers = start_receivers(_env(url, var_dir))
    try:
        assert receivers.stdout is not None
        partners = bench_partners(services, json.loads(_readline(receivers.stdout, 30)))
        print(f"\n{args.database}: worker CPU per delivery (ms), bookkeeping")
        for batch in args.batch or [20]:
            figures = bookkeeping(services, partners, batch, args.batches)
            ratio = figures["folded"] / figures["separate"]
            print(
                f"  {batch:>3} per claim: separate {figures['separate']:.3f}  "
                f"folded {figures['folded']:.3f}  (folded/separate {ratio:.2f})"
            )
        figures = sending(services, partners, args.sends, args.concurrency)
        print(f"sending, {args.concurrency} at a time (ms per call)")
        for name, value in figures.items():
            print(f"  {name:<15} {value:.3f}")
        print(f"load average at end: {os.getloadavg()[0]:.1f}")
    finally:
        stop_receivers(receivers)
        services.db.dispose()
        if scratch:
            _drop_postgres(scratch)


if __name__ == "__main__":
    main()
