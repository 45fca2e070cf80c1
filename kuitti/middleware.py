"""Pure ASGI middleware: request id, access log and metrics; the checks every request passes at
the edge, before any route sees it.

The edge checks (see docs/security.md):

- the body, JSON or form, chunked or not, is read here up to ``KUITTI_MAX_BODY_BYTES`` and refused
  with 413 the moment it grows past it, so no route ever holds more than the limit in memory;
- a path with a NUL character (U+0000) is 404, a query or form value with one is 400: no database
  stores NUL in text, and PostgreSQL fails on it.
"""

from __future__ import annotations

import re
import time
from collections.abc import Iterable

import orjson
import structlog
from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from kuitti.ids import random_bytes
from kuitti.logs import log, redact_path
from kuitti.metrics import count_request

_REQUEST_ID_RE = re.compile(r"^[A-Za-z0-9._-]{1,128}$")
_URLENCODED_NUL = re.compile(rb"%00|\x00")


class RequestContextMiddleware:
    """Binds a request id (the caller's ``X-Request-ID`` if sane, else a new one), logs one line
    per request, counts it, applies the edge checks, and turns an unhandled error into one log
    line and a 500 in the interface's error shape."""

    def __init__(self, app: ASGIApp, *, max_body_bytes: int) -> None:
        self.app = app
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        given = content_length = content_type = b""
        for name, value in scope["headers"]:
            if name == b"x-request-id":
                given = value
            elif name == b"content-length":
                content_length = value
            elif name == b"content-type":
                content_type = value
        given_id = given.decode("latin-1")
        request_id = given_id if _REQUEST_ID_RE.match(given_id) else random_bytes(16).hex()
        structlog.contextvars.clear_contextvars()
        structlog.contextvars.bind_contextvars(request_id=request_id)
        started = time.perf_counter()
        status = 500
        started_response = False
        id_header = (b"x-request-id", request_id.encode())

        async def send_with_id(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                status = message["status"]
                started_response = True
                message["headers"] = [*message.get("headers", []), id_header]
            await send(message)

        try:
            await self._checked(scope, receive, send_with_id, content_length, content_type)
        except Exception as exc:
            # Logged here, once, as JSON; not re-raised, or the server would log it again as
            # plain text ("Exception in ASGI application").
            log.exception("unhandled error", error=type(exc).__name__)
            if not started_response:
                await refuse(
                    send_with_id,
                    500,
                    "internal_error",
                    "Something went wrong on our side; nothing was saved.",
                )
        finally:
            elapsed = time.perf_counter() - started
            method = scope["method"]
            template = getattr(scope.get("route"), "path", "unmatched")
            count_request(method, template, status, elapsed)
            log.info(
                "request",
                method=method,
                path=redact_path(scope["path"]),
                status=status,
                duration_ms=round(elapsed * 1000, 2),
            )

    async def _checked(
        self,
        scope: Scope,
        receive: Receive,
        send: Send,
        content_length: bytes,
        content_type: bytes,
    ) -> None:
        limit = self.max_body_bytes
        too_large = f"The body is larger than the limit of {limit} bytes."
        if content_length.isdigit() and int(content_length) > limit:
            await refuse(send, 413, "payload_too_large", too_large)
            return
        if "\x00" in scope["path"]:
            await refuse(send, 404, "not_found", "No such resource, or you may not see it.")
            return
        if b"\x00" in scope["query_string"] or b"%00" in scope["query_string"]:
            await refuse(send, 400, "invalid_value", "query: text may not contain U+0000.")
            return
        body = await _read_body(receive, limit)
        if body is None:
            await refuse(send, 413, "payload_too_large", too_large)
            return
        if body is CLIENT_LEFT:
            return  # a body cut short is never handled as if it were whole
        if _form_has_nul(content_type, body):
            await refuse(send, 400, "invalid_value", "form: text may not contain U+0000.")
            return
        await self.app(scope, _replay(body, receive), send)


CLIENT_LEFT = b"<the client left before its body was whole>"


async def _read_body(receive: Receive, limit: int) -> bytes | None:
    """The whole body, None as soon as it passes ``limit`` (the rest is never read), or
    ``CLIENT_LEFT`` when the connection ends first."""
    body = bytearray()
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return CLIENT_LEFT
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


def _form_has_nul(content_type: bytes, body: bytes) -> bool:
    media = content_type.split(b";")[0].strip().lower()
    if media == b"application/x-www-form-urlencoded":
        return _URLENCODED_NUL.search(body) is not None
    if media == b"multipart/form-data":
        return b"\x00" in body
    return False


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


def route_path(scope: Scope) -> str:
    """The path the routes see: the request's path without the app's ``root_path``."""
    path: str = scope["path"]
    root: str = scope.get("root_path", "")
    return path[len(root) :] if root and path.startswith(root) else path


class TrailingSlashes:
    """Every API path answers with and without its trailing slash, without a redirect
    (interface, "Paths"): a path under ``/api/`` that no API route takes, whose twin (the same
    path with its trailing slash added or removed) one does, is answered as the twin. Only the
    form each route declares is routed, so every route has one path in the table, the router,
    the metrics and the API document."""

    def __init__(self, app: ASGIApp, *, routes: Iterable[BaseRoute]) -> None:
        self.app = app
        api = [r for r in routes if isinstance(r, Route) and r.path.startswith("/api/")]
        self._literal = frozenset(r.path for r in api if "{" not in r.path)
        self._patterns = tuple(r.path_regex for r in api if "{" in r.path)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            path = route_path(scope)
            if path.startswith("/api/") and not self._declared(path):
                twin = path[:-1] if path.endswith("/") else path + "/"
                # "/x//" is nobody's twin: "/x/" is the twin of a route "/x" only.
                if not path.endswith("//") and self._declared(twin):
                    scope["path"] = scope["path"][: len(scope["path"]) - len(path)] + twin
        await self.app(scope, receive, send)

    def _declared(self, path: str) -> bool:
        return path in self._literal or any(p.match(path) for p in self._patterns)
