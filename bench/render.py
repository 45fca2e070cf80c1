"""Rendering benchmark: milliseconds per document for each ``data_format`` a receipt is read in.

For a 5-row and a 60-row receipt (realistic rows, three VAT rates, a card payment with terminal
text; the 5-row one also has a QR code, an EAN-13 barcode and an OCMF verification), it reports:

- ``cold``: the first rendering in a fresh process (fonts loaded, nothing cached);
- ``warm``: the median of ``--repeat`` renderings after warm-up, the render cache bypassed;
- ``cached``: the median of ``--repeat`` calls of ``render()`` answered from the render cache.

It calls the renderers in-process (no HTTP, no database), as the read endpoint and mail do.

    .venv/bin/python bench/render.py [--repeat 30] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kuitti.models import Partner, Receipt
from kuitti.receipts.formats import DataFormat, rendering
from kuitti.receipts.formats.layout import Layout
from kuitti.receipts.formats.rendering import render
from tests.factories import card_payment, many_rows, receipt_doc, unsaved_receipt

GOALS_MS = {
    ("service_pdf", 5): 25.0,
    ("service_pdf", 60): 60.0,
    ("finvoice_pdf", 5): 25.0,
    ("finvoice_pdf", 60): 60.0,
    ("finvoice_xml", 5): 2.0,
    ("finvoice_xml", 60): 2.0,
}
CACHED_GOAL_MS = 2.0


def _document(rows: int) -> dict[str, Any]:
    doc = receipt_doc(many_rows(rows), payments=False)
    doc["payments"] = [
        card_payment(
            doc["totalPriceIncVAT"],
            transactionRawText="VISA DEBIT\nAID A0000000031010\nVARMENNUS A1B2C3",
        )
    ]
    if rows <= 5:
        from tests.receipts.formats.support import ocmf_key, verification

        doc["attachments"] = [
            {"type": "QRCODE", "kind": "TICKET", "title": "Lippu", "data": "https://k.example/t/1"},
            {"type": "BARCODE", "kind": "VOUCHER", "title": "Etu", "data": "6412345678907"},
        ]
        doc["verifications"] = [verification(ocmf_key())]
    return doc


def _poster() -> Partner:
    return Partner(
        id=uuid.uuid4(),
        name="Kauppa Oy",
        roles=["merchant"],
        api_key_hash="x",
        iban="FI2112345600000785",
        bic="NDEAFIHH",
        created_at=datetime.now(UTC),
    )


def _ms(action: Callable[[], object]) -> tuple[float, float]:
    """(wall, CPU) milliseconds of one call. CPU time is this thread's, so a busy machine
    (other processes on the two cores) inflates the wall figure but much less the CPU one."""
    wall, cpu = time.perf_counter(), time.thread_time()
    action()
    return (time.perf_counter() - wall) * 1000, (time.thread_time() - cpu) * 1000


def _median(samples: list[tuple[float, float]]) -> tuple[float, float]:
    return statistics.median(s[0] for s in samples), statistics.median(s[1] for s in samples)


CASES: list[tuple[str, DataFormat, Layout]] = [
    ("service_json", DataFormat.SERVICE_JSON, Layout.A4),
    ("service_pdf", DataFormat.SERVICE_PDF, Layout.A4),
    ("service_pdf roll", DataFormat.SERVICE_PDF, Layout.ROLL),
    ("finvoice_xml", DataFormat.FINVOICE_XML, Layout.A4),
    ("finvoice_pdf", DataFormat.FINVOICE_PDF, Layout.A4),
]


def run(repeat: int) -> list[dict[str, Any]]:
    poster = _poster()
    results: list[dict[str, Any]] = []
    for rows in (5, 60):
        doc = _document(rows)
        for label, fmt, layout in CASES:
            # a new id: nothing of it is cached yet
            receipt = unsaved_receipt(doc, ensure_ascii=False)

            def uncached(r: Receipt = receipt, f: DataFormat = fmt, lay: Layout = layout) -> None:
                rendering.cache.clear()
                render(r, poster, f, layout=lay, locale="fi")

            def cached_call(
                r: Receipt = receipt, f: DataFormat = fmt, lay: Layout = layout
            ) -> None:
                render(r, poster, f, layout=lay, locale="fi")

            cold_wall, _ = _ms(uncached)
            for _ in range(3):
                uncached()
            warm_wall, warm_cpu = _median([_ms(uncached) for _ in range(repeat)])
            cached_call()
            cached_wall, _ = _median([_ms(cached_call) for _ in range(repeat)])
            size = len(render(receipt, poster, fmt, layout=layout, locale="fi").content)
            goal = GOALS_MS.get((label, rows))
            results.append(
                {
                    "format": label,
                    "rows": rows,
                    "cold_ms": round(cold_wall, 2),
                    "warm_ms": round(warm_wall, 2),
                    "warm_cpu_ms": round(warm_cpu, 2),
                    "cached_ms": round(cached_wall, 4),
                    "bytes": size,
                    "goal_ms": goal,
                    "meets_goal": (goal is None or min(warm_wall, warm_cpu) <= goal)
                    and cached_wall <= CACHED_GOAL_MS,
                }
            )
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args()
    results = run(args.repeat)
    machine = {
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "machine": platform.machine(),
    }
    if args.json:
        print(json.dumps({"machine": machine, "results": results}))
        return
    print(f"Python {machine['python']}, {machine['cpus']} CPUs ({machine['machine']})")
    print(
        f"{'format':<18}{'rows':>5}{'cold ms':>10}{'warm ms':>10}{'warm cpu':>10}{'cached ms':>11}"
        f"{'bytes':>10}{'goal':>8}  ok"
    )
    for r in results:
        goal = f"{r['goal_ms']:.0f}" if r["goal_ms"] else "-"
        ok = "yes" if r["meets_goal"] else "NO"
        print(
            f"{r['format']:<18}{r['rows']:>5}{r['cold_ms']:>10.2f}{r['warm_ms']:>10.2f}"
            f"{r['warm_cpu_ms']:>10.2f}{r['cached_ms']:>11.4f}{r['bytes']:>10}{goal:>8}  {ok}"
        )
    print(f"load average: {' '.join(f'{x:.1f}' for x in os.getloadavg())}")


if __name__ == "__main__":
    main()
