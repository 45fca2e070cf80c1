"""The dispatch table picks the route FastAPI's router would pick, for every route the app
declares, every method, and the paths no route takes."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from starlette.types import ASGIApp, Message

from kuitti.app import ROUTERS, create_app
from kuitti.dispatch import Dispatch
from kuitti.services import Services

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE")
UNROUTED = (
    "/nope",
    "/healthz/",
    "/static/missing.css",
    "/docs-assets/missing.js",
    "/api/v1/receipts/0b5e1f2a-0000-4000-8000-000000000000/unknown/",
    "/api/v2/receipts/",
    "/api",
    "/",
)


def _sample_path(path_format: str) -> str:
    path = re.sub(r"\{[a-z_]+:path\}", "some/file.txt", path_format)
    return re.sub(r"\{[a-z_]+(:[a-z]+)?\}", "0b5e1f2a-0000-4000-8000-000000000000", path)


def _answer(app: ASGIApp, method: str, path: str) -> tuple[int, Any, Any, bytes]:
    """Status, selected route, path parameters and body of one request without credentials."""
    scope: dict[str, Any] = {
        "type": "http", "asgi": {"version": "3.0"}, "http_version": "1.1", "method": method,
        "scheme": "http", "path": path, "raw_path": path.encode(), "query_string": b"",
        "root_path": "", "client": ("127.0.0.1", 1), "server": ("127.0.0.1", 80),
        "headers": [(b"host", b"test"), (b"content-type", b"application/json")],
    }  # fmt: skip
    messages: list[Message] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        messages.append(message)

    async def request() -> None:
        await app(scope, receive, send)

    asyncio.run(request())
    body = b"".join(m.get("body", b"") for m in messages[1:])
    if b"csrf" in body or path.startswith("/metrics"):
        body = b"<changes from one request to the next>"
    return messages[0]["status"], scope.get("route"), scope.get("path_params"), body


def test_the_table_picks_what_the_router_picks(services: Services) -> None:
    app = create_app(services.settings, db=services.db, clock=services.clock)
    dispatch = app.router.middleware_stack
    assert isinstance(dispatch, Dispatch)
    paths = {
        _sample_path(route.path_format)
        for route in [*app.routes, *(r for router in ROUTERS for r in router.routes)]
        if hasattr(route, "path_format")
    }
    assert len(paths) > 30
    paths |= {path.removesuffix("/") if path.endswith("/") else path + "/" for path in paths}
    answers: dict[str, list[tuple[int, Any, Any, bytes]]] = {}
    for name, stack in (("table", dispatch), ("router", app.router.app)):
        app.router.middleware_stack = stack
        answers[name] = [
            _answer(app, method, path)
            for path in sorted(paths) + list(UNROUTED)
            for method in METHODS
        ]
    table, router = answers.values()
    assert table == router
    statuses = {status for status, *_ in table}
    assert {200, 401, 404, 405} <= statuses  # routes taken, refused and not found
