"""Receipt-link benchmark: latency of the link page (HTML) and its PDF for receipts of 5, 200
and 2000 rows, and of ingest with delivery tokens (RECEIPT_ID + EMAIL + CARD), sequential
requests over real HTTP on loopback against one in-process server on SQLite.

    .venv/bin/python bench/link_pages.py [--requests 200]

Prints one JSON object: p50/p95 milliseconds per case. The PDF is rendered once per receipt and
language and then served from the render cache, so "pdf_first" and "pdf_cached" are reported apart.
"""

from __future__ import annotations

import argparse
import json
import socket
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import uvicorn

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from kuitti.app import create_app  # noqa: E402
from kuitti.clock import SystemClock  # noqa: E402
from kuitti.config import Settings  # noqa: E402
from kuitti.db import Database  # noqa: E402
from kuitti.dbmigrate import upgrade  # noqa: E402
from kuitti.services import Services  # noqa: E402
from tests.factories import make_partner, many_rows, receipt_doc, token_body  # noqa: E402


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def percentiles(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1000, 1),
        "p95_ms": round(ordered[int(len(ordered) * 0.95) - 1] * 1000, 1),
        "n": len(ordered),
    }


def timed(http: httpx.Client, method: str, path: str, **kwargs: Any) -> float:
    started = time.perf_counter()
    response = http.request(method, path, **kwargs)
    elapsed = time.perf_counter() - started
    assert response.status_code == 200, response.text[:200]
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        port = free_port()
        settings = Settings(
            database_url=f"sqlite:///{tmp}/bench.db",
            var_dir=Path(tmp),
            public_url=f"http://127.0.0.1:{port}",
            secret_key="bench-secret-key-not-for-production",
            log_level="WARNING",
            link_rate_limit_per_minute=10**9,
        )
        db = Database(settings.resolved_database_url)
        upgrade(db)
        services = Services(settings=settings, db=db, clock=SystemClock())
        server = uvicorn.Server(
            uvicorn.Config(
                create_app(settings, db=db), host="127.0.0.1", port=port, log_level="warning"
            )
        )
        thread = threading.Thread(target=server.run, daemon=True)
        thread.start()
        while not server.started:
            time.sleep(0.01)
        from kuitti.models import PartnerRole

        merchant = make_partner(services, PartnerRole.MERCHANT, namespaces=["bench"])
        headers = {"Authorization": f"Token {merchant.api_key}"}
        results: dict[str, Any] = {}
        with httpx.Client(base_url=settings.public_url, timeout=60) as http:
            for rows in (5, 200, 2000):
                token = {"type": "RECEIPT_ID", "value": f"rows-{rows}", "namespace": "bench"}
                body = token_body(receipt_doc(many_rows(rows)), token)
                assert http.post("/api/v1/receipts/", json=body, headers=headers).status_code == 200
                path = f"/ns/bench/r/rows-{rows}"
                count = args.requests if rows < 2000 else max(20, args.requests // 10)
                results[f"page_{rows}_rows"] = percentiles(
                    [timed(http, "GET", path) for _ in range(count)]
                )
                results[f"pdf_first_{rows}_rows_ms"] = round(
                    timed(http, "GET", path + "/pdf") * 1000, 1
                )
                results[f"pdf_cached_{rows}_rows"] = percentiles(
                    [timed(http, "GET", path + "/pdf") for _ in range(20)]
                )
            samples = []
            for i in range(args.requests):
                body = token_body(
                    receipt_doc(receiptNumber=f"T-{i}"),
                    {"type": "RECEIPT_ID", "value": f"t-{i}", "namespace": "bench"},
                    {"type": "EMAIL", "value": f"asiakas{i}@example.com"},
                    {"type": "CARD", "id": "no-such-card", "value": "415301******1234"},
                )
                samples.append(timed(http, "POST", "/api/v1/receipts/", json=body, headers=headers))
            results["ingest_with_3_tokens"] = percentiles(samples)
            samples = [
                timed(
                    http,
                    "POST",
                    "/api/v1/receipts/",
                    json=receipt_doc(receiptNumber=f"P-{i}"),
                    headers=headers,
                )
                for i in range(args.requests)
            ]
            results["ingest_without_tokens"] = percentiles(samples)
        server.should_exit = True
        thread.join(timeout=10)
        db.dispose()
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
