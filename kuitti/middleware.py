"""Pure ASGI middleware: request id, access log and metrics; early refusal of large bodies."""

from __future__ import annotations

import re
import time
import uuid

import orjson
import structlog
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kuitti.logs import log
from kuitti.metrics import HTTP_LATENCY, HTTP_REQUESTS

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


class RequestContextMiddleware:
    """Binds a request id (the caller's ``X-Request-ID`` if sane, else a new one), logs one line
    per request, counts it, and refuses a body whose declared length is over the limit."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = dict(scope["headers"])
        given = headers.get(b"x-request-id", b"").decode("latin-1")
        request_id = given if _REQUEST_ID_RE.match(given) else uuid.uuid4().hex
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        status = 500

        async def send_with_id(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                message["headers"] = [
                    *message.get("headers", []),
                    (b"x-request-id", request_id.encode()),
                ]
            await send(message)

        try:
            declared = headers.get(b"content-length")
            if declared is not None and declared.isdigit() and int(declared) > self.max_body_bytes:
                await _too_large(send_with_id, self.max_body_bytes)
            else:
                await self.app(scope, receive, send_with_id)
        finally:
            elapsed = time.perf_counter() - started
            route = scope.get("route")
            template = getattr(route, "path", "unmatched")
            HTTP_REQUESTS.labels(scope["method"], template, str(status)).inc()
            HTTP_LATENCY.labels(scope["method"], template).observe(elapsed)
            log.info(
                "request",
                method=scope["method"],
                path=scope["path"],
                status=status,
                duration_ms=round(elapsed * 1000, 2),
            )


async def _too_large(send: Send, limit: int) -> None:
    body = orjson.dumps(
        {
            "error": "payload_too_large",
            "decription": f"The body is larger than the limit of {limit} bytes.",
        }
    )
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
