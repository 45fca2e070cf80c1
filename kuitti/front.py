"""The front door: the hot endpoints, each answered by a plain ASGI handler in front of FastAPI.

``FRONT_ROUTES`` is the table. A request for one of its routes (method and path) is answered by
the route's handler behind the app's own middleware (``kuitti.middleware``: the request id, the
access line, the metrics, the edge checks, the 500 of an unhandled error, the trailing slash),
exactly as every other request passes it, but without FastAPI's work around a route (its
exception and exit-stack middleware, the router's walk, the request object, dependency solving
and response handling), which cost about a tenth of a served receipt post's CPU
(docs/performance.md, "Ingest"). Every other request, including another method on the same
path (405), goes to FastAPI's routes.

FastAPI describes only its own routes, so each handler's operation is declared for the API
document beside the handler (``FRONT_DOCUMENTED``: routers that are never included in the app).
"""

from __future__ import annotations

from collections.abc import Iterable

from starlette.routing import BaseRoute, Route
from starlette.types import ASGIApp, Receive, Scope, Send

from kuitti.middleware import route_path
from kuitti.receipts import routes as receipts

FRONT_ROUTES: tuple[Route, ...] = (
    Route("/api/v1/receipts/", receipts.ReceiptPost(), methods=["POST"]),
)
FRONT_DOCUMENTED: tuple[BaseRoute, ...] = (*receipts.documented.routes,)
"""The API document's operations of ``FRONT_ROUTES``, in the order the document lists them."""


class FrontDoor:
    """The innermost of the app's middleware: ``routes`` answered here, the rest by FastAPI."""

    def __init__(self, app: ASGIApp, *, routes: Iterable[Route]) -> None:
        self.app = app
        self._routes = {
            (method, route.path): route for route in routes for method in route.methods or ()
        }

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            route = self._routes.get((scope["method"], route_path(scope)))
            if route is not None:
                scope["route"] = route  # as the router sets it: the metrics' label
                await route.app(scope, receive, send)
                return
        await self.app(scope, receive, send)
