"""CPU per receipt of each step of ``parse_receipt_request``, the quick way and the reference way
(``fully=True``) side by side, in one run.

The bodies are those of ``bench/ingest.py``: realistic grocery receipts with a CARD payment, 60
rows each, then 1–60 rows at random. Each step runs over the same bodies: the JSON edge,
Pydantic, the cross-field rules, the scan for full card numbers, the whole call, then the
document's hash (which ingest takes from the parsed request instead of parsing the body again).
The 60-row bodies are measured in the token form too (``{"attributes": …, "receipt": …}``).

Then the document's bytes as stored: now the posted bytes (the body itself, or the token form's
``"receipt"`` span, which msgspec finds, and the check of the floats kuitti computes with),
before issue 40's item 6 ``orjson.dumps`` of the parsed document. CPU per post before it is
the whole call's, less the span and the check, plus ``orjson.dumps``.

The reference way is the slow path the quick one falls back to, not the code before it: it walks
every document for card numbers, where the quick way first scans the body. Each figure is the
best of ``--repeat`` passes of this process's user+system CPU divided by the bodies, so other load
on the machine inflates it as little as possible; the load average is printed beside it. Compare
the ratios, taken in the same run, more than the absolute figures.

``--profile`` then prints where ``parse_receipt_request`` spends its time on the 60-row bodies
(cProfile, own time per function; the profiler's overhead inflates every figure alike, so read
the shares, not the milliseconds).

    .venv/bin/python bench/validation.py
    .venv/bin/python bench/validation.py --bodies 500 --repeat 7 --profile
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import random
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

import orjson
from ingest import realistic_receipt  # bench/ingest.py

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.inputs import (  # noqa: E402
    UNSURE,
    json_quickly,
    parse_json,
    parse_json_fully,
    scan_body,
)
from kuitti.receipts.schema import Receipt  # noqa: E402
from kuitti.receipts.validation import (  # noqa: E402
    _TOKEN_FORM,
    _card_numbers,
    _inexact_numbers,
    _may_hold_card_number,
    canonical_hash,
    check_rules,
    parse_receipt_request,
)

T = TypeVar("T")


def cpu_ms(step: Callable[[T], object], inputs: Sequence[T], repeat: int) -> float:
    """Best CPU milliseconds per input (a body, a parsed document) over ``repeat`` passes."""
    best = float("inf")
    for _ in range(repeat):
        start = time.process_time()
        for value in inputs:
            step(value)
        best = min(best, time.process_time() - start)
    return best / len(inputs) * 1000


def report(title: str, bodies: list[bytes], repeat: int) -> None:
    posted = {body: orjson.loads(body) for body in bodies}
    documents = {body: posted[body].get("receipt", posted[body]) for body in bodies}
    receipts = {body: Receipt.model_validate(documents[body]) for body in bodies}

    def card_scan(body: bytes) -> object:
        """What validation does: the body scan, and the walk only when the scan says so."""
        return _may_hold_card_number(body, scan_body(body)) and list(
            _card_numbers(documents[body], ())
        )

    def card_walk(body: bytes) -> object:
        return list(_card_numbers(documents[body], ()))

    steps: list[tuple[str, Callable[[bytes], object], Callable[[bytes], object] | None]] = [
        ("JSON edge (parse_json)", parse_json, parse_json_fully),
        ("Pydantic (Receipt.model_validate)", lambda b: Receipt.model_validate(documents[b]), None),
        (
            "cross-field rules (check_rules)",
            lambda b: check_rules(receipts[b], attachments_enabled=False),
            None,
        ),
        ("full card numbers", card_scan, card_walk),
        (
            "parse_receipt_request",
            lambda b: parse_receipt_request(b, attachments_enabled=False),
            lambda b: parse_receipt_request(b, attachments_enabled=False, fully=True),
        ),
        ("document hash (canonical_hash)", lambda b: canonical_hash(documents[b]), None),
    ]
    wrapped = "receipt" in posted[bodies[0]]
    print(
        f"\n{title}: {len(bodies)} bodies, {sum(map(len, bodies)) // len(bodies)} bytes on average"
    )
    print(f"{'step':<36} {'quick ms':>9} {'reference ms':>13} {'ratio':>6}")
    for name, quick, reference in steps:
        quick_ms = cpu_ms(quick, bodies, repeat)
        if reference is None:
            print(f"{name:<36} {quick_ms:>9.3f} {'(same)':>13}")
            continue
        reference_ms = cpu_ms(reference, bodies, repeat)
        print(f"{name:<36} {quick_ms:>9.3f} {reference_ms:>13.3f} {reference_ms / quick_ms:>5.1f}x")
    print(f"{'(orjson.loads alone)':<36} {cpu_ms(orjson.loads, bodies, repeat):>9.3f}")
    whole_ms = cpu_ms(lambda b: parse_receipt_request(b, attachments_enabled=False), bodies, repeat)
    span_ms = cpu_ms(lambda b: bytes(_TOKEN_FORM.decode(b).receipt), bodies, repeat)
    sources = {b: bytes(_TOKEN_FORM.decode(b).receipt) if wrapped else b for b in bodies}
    check_ms = cpu_ms(lambda b: list(_inexact_numbers(receipts[b], sources[b], ())), bodies, repeat)
    dumps_ms = cpu_ms(lambda b: orjson.dumps(documents[b]), bodies, repeat)
    span_ms = span_ms if wrapped else 0.0  # the bare form stores the body itself
    now_ms = span_ms + check_ms
    before_ms = whole_ms - now_ms + dumps_ms
    print(
        f"stored bytes: now {now_ms:.3f} ms (span {span_ms:.3f} + float check {check_ms:.3f}), "
        f"before {dumps_ms:.3f} (orjson.dumps)"
    )
    print(f"CPU a post, validation and stored bytes: now {whole_ms:.3f} ms, before {before_ms:.3f}")
    served = sum(json_quickly(body) is not UNSURE for body in bodies)
    print(f"bodies the quick JSON reading served: {served} of {len(bodies)}")


def profile(bodies: list[bytes], top: int = 15) -> None:
    """Own time per function of ``parse_receipt_request`` over the bodies, largest first."""
    profiler = cProfile.Profile()
    profiler.enable()
    for body in bodies:
        parse_receipt_request(body, attachments_enabled=False)
    profiler.disable()
    stats = pstats.Stats(profiler)
    rows = sorted(stats.stats.items(), key=lambda item: -item[1][2])  # type: ignore[attr-defined]
    whole = sum(row[1][2] for row in rows)
    print(f"\nwhere parse_receipt_request spends its time (cProfile, {len(bodies)} bodies)")
    print(f"{'function':<60} {'calls/body':>10} {'share':>6}")
    for (filename, line, name), (_, calls, own, _, _) in rows[:top]:
        where = f"{Path(filename).name}:{line}({name})" if line else name
        print(f"{where[:60]:<60} {calls / len(bodies):>10.1f} {own / whole:>6.1%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=200, help="bodies per set")
    parser.add_argument("--repeat", type=int, default=5, help="passes; the best is kept")
    parser.add_argument("--profile", action="store_true", help="print cProfile's split too")
    args = parser.parse_args()
    rng = random.Random(20260115)
    sixty = [orjson.dumps(realistic_receipt(rng, n, 60)) for n in range(args.bodies)]
    mixed = [orjson.dumps(realistic_receipt(rng, n, 0)) for n in range(args.bodies)]
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"load average before: {load} ({os.cpu_count()} cores); CPU time of this process only")
    report("60-row receipts", sixty, args.repeat)
    report("1-60-row receipts", mixed, args.repeat)
    tokens = {"tokens": [{"type": "RECEIPT_ID", "namespace": "kauppa", "value": "B-1"}]}
    wrapped = [b'{"attributes":' + orjson.dumps(tokens) + b',"receipt":' + b + b"}" for b in sixty]
    report("60-row receipts, token form", wrapped, args.repeat)
    if args.profile:
        profile(sixty)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(f"\nload average after: {load}")


if __name__ == "__main__":
    main()
