"""Prometheus metrics. Each domain adds its own here, so ``/metrics`` has one registry."""

from __future__ import annotations

from prometheus_client import Counter, Histogram

HTTP_REQUESTS = Counter(
    "kuitti_http_requests_total", "HTTP requests answered", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "kuitti_http_request_duration_seconds",
    "Time to answer an HTTP request",
    ["method", "route"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)
RECEIPTS_CREATED = Counter("kuitti_receipts_created_total", "Receipts stored")
