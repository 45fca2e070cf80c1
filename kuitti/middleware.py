"""Pure ASGI middleware: request id, access log and metrics; the checks every request passes at
the edge, before any route sees it.

The edge checks (see docs/security.md):

- the body, JSON or form, chunked or not, is read here up to ``KUITTI_MAX_BODY_BYTES`` and refused
  with 413 the moment it grows past it, so no route ever holds more than the limit in memory.
"""

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
    per request, counts it, and applies the edge checks."""

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
            await self._checked(scope, receive, send_with_id, headers)
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

    async def _checked(
        self, scope: Scope, receive: Receive, send: Send, headers: dict[bytes, bytes]
    ) -> None:
        limit = self.max_body_bytes
        too_large = f"The body is larger than the limit of {limit} bytes."
        declared = headers.get(b"content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            await refuse(send, 413, "payload_too_large", too_large)
            return
        body = await _read_body(receive, limit)
        if body is None:
            await refuse(send, 413, "payload_too_large", too_large)
            return
        await self.app(scope, _replay(body, receive), send)


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, or None as soon as it passes ``limit`` (the rest is never read)."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return bytes(body)  # the client left; the route will see the disconnect
        body += message.get("body", b"")
        if len(body) > limit:
            return None
        if not message.get("more_body", False):
            return bytes(body)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def replay() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replay


async def refuse(send: Send, status: int, code: str, description: str) -> None:
    """Answer with the interface's error shape without calling the app; closes the connection,
    since an unread body may follow."""
    body = orjson.dumps({"error": code, "decription": description})
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
