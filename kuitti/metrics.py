"""Prometheus metrics. Each domain adds its own here, so ``/metrics`` has one registry."""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Gauge, Histogram

HTTP_REQUESTS = Counter(
    "kuitti_http_requests_total", "HTTP requests answered", ["method", "route", "status"]
)
HTTP_LATENCY = Histogram(
    "kuitti_http_request_duration_seconds",
    "Time to answer an HTTP request",
    ["method", "route"],
    buckets=(0.002, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5),
)

REQUEST_WAIT = Histogram(
    "kuitti_request_wait_seconds",
    "Time from a served request's arrival to its process's start on it (kuitti serve)",
    buckets=(0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5),
)

_REQUEST_COUNTERS: dict[tuple[str, str, int], Any] = {}
_REQUEST_TIMERS: dict[tuple[str, str], Any] = {}


def count_request(method: str, route: str, status: int, seconds: float) -> None:
    """Count one answered request and its time. The labelled children are looked up once per
    method, route template and status, not on every request: ``labels()`` costs more than the
    increment itself."""
    counter = _REQUEST_COUNTERS.get((method, route, status))
    if counter is None:
        counter = HTTP_REQUESTS.labels(method, route, str(status))
        _REQUEST_COUNTERS[method, route, status] = counter
    counter.inc()
    timer = _REQUEST_TIMERS.get((method, route))
    if timer is None:
        timer = HTTP_LATENCY.labels(method, route)
        _REQUEST_TIMERS[method, route] = timer
    timer.observe(seconds)


# The read replica (kuitti/replicas.py), when KUITTI_READ_DATABASE_URL names one.
REPLICA_LAG = Gauge(
    "kuitti_read_replica_lag_seconds",
    "How far the read replica's applied state is behind the primary: 0 while it has applied "
    "all it received, else the age of its last applied commit; NaN while it is away (0 without a "
    "read replica)",
)
REPLICA_UP = Gauge(
    "kuitti_read_replica_up",
    "1 while the read replica answers, 0 while reads skip it (and without a read replica)",
)
REPLICA_READS = Counter(
    "kuitti_read_replica_reads_total",
    "Reads that could go to the read replica, by outcome: replica (answered there), miss (not "
    "there yet, or older there: the primary answered), lagging (a list beyond the lag bound: "
    "the primary), away (the replica away: the primary), primary_away (rights decided on the "
    "replica while the primary was away)",
    ["outcome"],
)

RECEIPTS_CREATED = Counter("kuitti_receipts_created_total", "Receipts stored")
INGEST_BATCH = Histogram(
    "kuitti_ingest_batch_receipts",
    "Receipt posts written by one committed transaction of a process's ingest writer",
    buckets=(1, 2, 5, 10, 25, 50, 100, 256),
)

# Webhooks (kuitti/webhooks/worker.py)
WEBHOOKS_SENT = Counter(
    "kuitti_webhook_deliveries_sent_total",
    "Webhook deliveries that a partner accepted with a 2xx answer",
    ["notification_type"],
)
WEBHOOKS_RETRIED = Counter(
    "kuitti_webhook_deliveries_retried_total",
    "Webhook attempts that failed and were scheduled again",
    ["notification_type"],
)
WEBHOOKS_FAILED = Counter(
    "kuitti_webhook_deliveries_failed_total",
    "Webhook deliveries given up after the last retry",
    ["notification_type"],
)
WEBHOOK_LAG = Histogram(
    "kuitti_webhook_delivery_lag_seconds",
    "From the event (outbox row written) to the partner's 2xx answer",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 3600, 86400),
)
WEBHOOK_ATTEMPT_LATENCY = Histogram(
    "kuitti_webhook_attempt_duration_seconds",
    "Duration of one webhook HTTP call",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
)
WEBHOOK_WORKER_ERRORS = Counter(
    "kuitti_webhook_worker_errors_total",
    "Worker rounds that failed because the database could not be reached (the worker goes on)",
)

# Delivery (kuitti/delivery/)
RECEIPT_TOKENS = Counter(
    "kuitti_receipt_tokens_total",
    "Tokens of create-receipt requests by type and reported status",
    ["type", "status"],
)
MAIL_MESSAGES = Counter(
    "kuitti_mail_messages_total",
    "E-mail send attempts by result: sent, retried (will be tried again) or failed (given up)",
    ["result"],
)
LINK_RATE_LIMITED = Counter(
    "kuitti_link_pages_rate_limited_total",
    "Receipt-link requests refused by the rate limit or the miss limits",
)
LINK_MISSES = Counter(
    "kuitti_link_pages_not_found_total", "Receipt-link lookups that found no receipt"
)
LINK_MISS_BURSTS = Counter(
    "kuitti_link_miss_bursts_total",
    "Bursts of receipt-link lookups that found nothing: a client or a namespace reached its "
    "miss limit for the minute (someone is probably guessing links)",
    ["scope"],
)

# Card-linking (kuitti/cards/)
CARD_MATCHING_SECONDS = Histogram(
    "kuitti_card_matching_seconds",
    "Time spent deciding card-linking matches, by what triggered it (worker: a batch of one "
    "merchant id's due payments — new receipts and closed auth windows; transaction: an "
    "issuer's transaction in its own request)",
    ["trigger"],
    buckets=(0.0005, 0.001, 0.002, 0.003, 0.005, 0.0075, 0.01, 0.015, 0.025, 0.05, 0.1, 0.25),
)
CARD_MATCHING_DELAY = Histogram(
    "kuitti_card_matching_delay_seconds",
    "From a receipt's commit to the matching worker's first decision on its card payment",
    buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0),
)
CARD_MATCHES = Counter(
    "kuitti_card_matches_total",
    "Receipt card payments delivered by card-linking, by strength (code: an equal authorization "
    "code or reference number; keys: after the auth window; masked_pan: a pilot card)",
    ["strength"],
)
CARD_MATCH_WAITS = Counter(
    "kuitti_card_match_waits_total",
    "Card-linking decisions that left a payment waiting, by reason (no_candidate, tied, "
    "awaiting_window, contested)",
    ["why"],
)

# OAuth and service users (kuitti/oauth/, kuitti/users/)
OAUTH_TOKEN_REQUESTS = Counter(
    "kuitti_oauth_token_requests_total",
    "Token endpoint answers: issued, or the RFC 6749 error code",
    ["result"],
)
OAUTH_DECISIONS = Counter(
    "kuitti_oauth_consent_decisions_total", "Consent page decisions", ["decision"]
)
LOGINS = Counter(
    "kuitti_logins_total", "Login attempts by result: ok, failed or throttled", ["result"]
)
