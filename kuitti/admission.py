"""Load shedding: which requests a server process takes up, and how it answers the rest.

A process that takes every request queues them all, and under more load than it can serve every
answer waits behind the queue (seconds). The excess is answered at once with 503 and
``Retry-After`` in the error shape (``ServiceBusy``), so the admitted requests keep their usual
latency and the clients can retry elsewhere or later. The health endpoints are always admitted:
a loaded process is alive and ready.

Three bounds do it:

- the time a request waited before its process started on it (``kuitti.edge.Queue``): when
  the event loop is saturated the queue forms in the kernel's accept queue, and goes on inside
  the process, where the requests read in one turn of the event loop run one after another in
  the next, and on PostgreSQL wait for a connection of the read pool (``kuitti.db.READ_LINE``):
  one queue, one target;
- the requests a process works on at once (``KUITTI_MAX_REQUESTS_IN_FLIGHT``), counted by
  ``kuitti.edge`` from the moment the request is taken up until its response is sent, its
  body's reading included;
- on PostgreSQL, the wait for a connection of the read pool (``kuitti.db``): a request already
  taken up that cannot have one within ``POOL_WAIT_SHARE`` of the longest wait, or under a
  standing queue by its arrival plus the target (``kuitti.db.READ_BY``), is refused rather
  than queued.

The first two answer from ``kuitti serve``'s protocol with ``BUSY_ANSWER``, bytes encoded once,
without building a request or running the application (while the process sheds, from the first
bytes of a connection, ``kuitti.edge.Refusing``). Such a refusal is counted
(``kuitti_http_requests_total{route="shed"}``) and logged at most once per ``LOG_EVERY_SECONDS``
with the count since the last line (``Refusals``): under five times the load a process refuses
thousands of requests a second, and a log line each would cost more than the refusal. The
third ran the application, and is counted and logged as its route's 503.
"""

from __future__ import annotations

import time

import orjson
from prometheus_client import Counter

from kuitti.errors import BUSY_RETRY_AFTER_SECONDS, ServiceBusy
from kuitti.logs import log
from kuitti.metrics import HTTP_REQUESTS
from kuitti.protocols import closing_answer

ALWAYS_ADMITTED = frozenset({"/healthz", "/readyz", "/metrics"})
BUSY = ServiceBusy().details()[0]
RETRY_AFTER = ((b"retry-after", str(BUSY_RETRY_AFTER_SECONDS).encode("ascii")),)
BUSY_ANSWER = closing_answer(503, orjson.dumps(BUSY.as_json()), RETRY_AFTER)
POOL_WAIT_SHARE = 0.25
"""The share of ``KUITTI_MAX_QUEUE_SECONDS`` a PostgreSQL read waits for a connection of its pool
before it is refused (``kuitti.db``)."""
STANDING_INTERVAL = 0.1
"""The interval whose late requests (waits past ``KUITTI_QUEUE_TARGET_SECONDS``) decide whether
the queue stands through the next one (``kuitti.edge.Queue``; CoDel's 100 ms)."""
STANDING_REQUESTS = 32
"""How many requests of an interval must have waited past the target, besides most of them, for
the queue to count as standing: a few clients on a host short of CPU make a handful."""
LOG_EVERY_SECONDS = 10.0


class Refusals:
    """The process's count of requests shed, and its sampled log line."""

    def __init__(self, every: float = LOG_EVERY_SECONDS) -> None:
        self.every = every
        self.since_logged = 0
        self.logged_at = float("-inf")
        self._counters: dict[str, Counter] = {}

    def refused(self, method: str, why: str, now: float | None = None) -> None:
        counter = self._counters.get(method)
        if counter is None:
            counter = self._counters[method] = HTTP_REQUESTS.labels(method, "shed", "503")
        counter.inc()
        self.since_logged += 1
        now = time.monotonic() if now is None else now
        if now - self.logged_at >= self.every:
            log.warning(
                "requests shed",
                refused=self.since_logged,
                last_reason=why,
                seconds=None if self.logged_at == float("-inf") else round(now - self.logged_at),
            )
            self.since_logged = 0
            self.logged_at = now


REFUSALS = Refusals()
"""The process's one count: every connection's protocol refuses through it."""
