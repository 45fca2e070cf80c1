"""Routes answered in front of FastAPI's stack: today only the receipt post.

A receipt post is the request kuitti must serve by the thousand per second, and FastAPI's stack
around a route (its error, telemetry and body-limit middleware, the exit stack, the router and
the table in front of it (``dispatch.py``), the route's request object, dependency solving and
response handling) cost about a tenth of a served post's CPU (docs/performance.md, "Ninth
round"). A route that a routes module names in its ``DIRECT_HANDLERS`` is answered here instead by
a plain ASGI handler of that module, behind the app's own middleware (``RequestContextMiddleware``:
the request id, the access line, the metrics, the edge checks, the 500 of an unhandled error),
exactly as every other request passes it. Everything else goes to FastAPI unchanged.

The route stays declared in its router, so the API document, the 404 and 405 answers for its
path, and the route label of the metrics are still FastAPI's; only the one method of the one path
(and its slash twin) is answered here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from fastapi.routing import APIRoute
from starlette._utils import get_route_path
from starlette.middleware import Middleware
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send


class DirectRoutes:
    """An ASGI app in front of FastAPI's middleware stack (``KuittiAPI.build_middleware_stack``)."""

    def __init__(
        self,
        framework: ASGIApp,
        routes: Iterable[BaseRoute],
        handlers: Mapping[Callable[..., Any], ASGIApp],
        middleware: Sequence[Middleware],
    ) -> None:
        self.framework = framework
        self._answered: dict[tuple[str, str], tuple[APIRoute, ASGIApp]] = {}
        for route in routes:
            if not isinstance(route, APIRoute) or route.endpoint not in handlers:
                continue
            handler = handlers[route.endpoint]
            for cls, args, kwargs in reversed(middleware):
                handler = cls(handler, *args, **kwargs)
            for method in route.methods or ():
                self._answered[(method, route.path)] = (route, handler)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            answered = self._answered.get((scope["method"], get_route_path(scope)))
            if answered is not None:
                route, handler = answered
                scope["route"] = route  # what the router would have set: the metrics' label
                await handler(scope, receive, send)
                return
        await self.framework(scope, receive, send)
