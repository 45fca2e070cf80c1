"""Load shedding, part two: at most ``KUITTI_MAX_REQUESTS_IN_FLIGHT`` requests in flight per
process.

A process that takes every request queues them all, and under more load than it can serve every
answer waits behind the queue (seconds). The excess is answered at once with 503 and
``Retry-After`` in the error shape (``BUSY``), so the admitted requests keep their usual latency
and the clients can retry elsewhere or later. The health endpoints are always admitted: a loaded
process is alive and ready.

Two bounds do it. The first, in ``kuitti.edge``, is on the time a request waited before its
process took it up: when the event loop itself is saturated the queue forms in the kernel's
accept queue, where no count of requests in flight sees it. The second, here, is on the requests
a process works on at once, for the routes that wait on something else (PostgreSQL, a thread):
a request counts from the moment the application sees it until its response is sent, its body's
reading included. One event loop per process runs this, so a plain counter, the process's
``Gate``, is exact.
"""

from __future__ import annotations

from starlette.types import ASGIApp, Receive, Scope, Send

from kuitti.errors import ErrorDetail
from kuitti.metrics import count_request
from kuitti.responses import error_response

ALWAYS_ADMITTED = frozenset({"/healthz", "/readyz", "/metrics"})
RETRY_AFTER_SECONDS = 1
BUSY = ErrorDetail(
    "service_unavailable",
    "The service is busier than it can serve; nothing was done. Try again shortly.",
)


class Gate:
    """The requests in flight in this process, and how many may be."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.in_flight = 0


class AdmissionLimit:
    """Admits at most ``gate.limit`` HTTP requests at a time; answers the rest 503 at once."""

    def __init__(self, app: ASGIApp, *, gate: Gate) -> None:
        self.app = app
        self.gate = gate
        self.refusal = error_response(
            [BUSY],
            503,
            {"Retry-After": str(RETRY_AFTER_SECONDS), "Connection": "close"},
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["path"] in ALWAYS_ADMITTED:
            await self.app(scope, receive, send)
            return
        gate = self.gate
        if gate.in_flight >= gate.limit:
            count_request(scope["method"], "shed", 503, 0.0)
            await self.refusal(scope, receive, send)
            return
        gate.in_flight += 1
        try:
            await self.app(scope, receive, send)
        finally:
            gate.in_flight -= 1
