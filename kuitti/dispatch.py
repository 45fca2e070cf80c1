"""The route of a request found in a table, before FastAPI's router walks its routes.

FastAPI's router tries its routes one by one, each by regular expression, and for a route of an
included router it does that walk twice (once to pick the router, once inside it): about half
of a ``/healthz`` request's CPU and a fifth of a receipt read's (``bench/reading_inprocess.py``
with the table and without). The table is built from the app's own routes when the first
request comes, so routes are still declared one way only and the OpenAPI document does not
change. It indexes the routes by the first three segments of their path; a request tries, in the
router's order, only the routes of its own index entry plus those whose first segments hold a
parameter, and the first route that takes both the path and the method answers, exactly as the
router would have chosen it.

It reads FastAPI's private structures (``effective_candidates``, the ``scope["fastapi"]`` keys)
and Starlette's ``get_route_path``, so ``pyproject.toml`` holds FastAPI to the minor version
the tests cover (``tests/test_dispatch.py`` compares the table's choice with the router's).

Routes are declared before the app serves (``create_app``); one added after the first request
would be found by the router only where the table sends the request there.

What the table does not settle goes to the router unchanged: a path no route takes (404), a
method the path does not allow (405), and any route the table does not model (static files,
the OpenAPI document), which the router then finds first itself.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from fastapi.routing import APIRoute, APIRouter
from starlette._utils import get_route_path
from starlette.convertors import Convertor
from starlette.routing import BaseRoute
from starlette.types import ASGIApp, Receive, Scope, Send

# FastAPI keeps which included router and which of its routes a request selected here
# (``fastapi.routing``): the route's handler reads them back.
_FASTAPI_SCOPE_KEY = "fastapi"
_INCLUDED_ROUTER_KEY = "included_router"
_ROUTE_CONTEXT_KEY = "effective_route_context"

_INDEXED_SEGMENTS = 4  # the empty one before the leading slash and three more
Index = tuple[str, ...]


@dataclass(frozen=True, slots=True)
class _Entry:
    """One route as the router would try it; ``route`` None for one the table leaves to it."""

    regex: re.Pattern[str]
    convertors: dict[str, Convertor[Any]]
    methods: frozenset[str]
    route: APIRoute | None
    included_router: BaseRoute | None
    context: Any


class Dispatch:
    """An ASGI app in place of the router's own entry point (``router.middleware_stack``)."""

    def __init__(self, router: APIRouter) -> None:
        self.router = router
        self.fallback: ASGIApp = router.middleware_stack
        self._by_index: dict[Index, tuple[_Entry, ...]] | None = None
        self._unindexed: tuple[_Entry, ...] = ()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.fallback(scope, receive, send)
            return
        if self._by_index is None:
            self._build()
        assert self._by_index is not None
        path = get_route_path(scope)
        index = tuple(path.split("/", _INDEXED_SEGMENTS)[:_INDEXED_SEGMENTS])
        method = scope["method"]
        for entry in self._by_index.get(index, self._unindexed):
            found = entry.regex.match(path)
            if found is None or (entry.route is not None and method not in entry.methods):
                continue
            if entry.route is None:
                break  # a route the table does not model comes first: the router decides
            await self._handle(entry, found.groupdict(), scope, receive, send)
            return
        await self.fallback(scope, receive, send)

    async def _handle(
        self, entry: _Entry, params: dict[str, str], scope: Scope, receive: Receive, send: Send
    ) -> None:
        """What the router does for the route it selected, without searching again."""
        route = entry.route
        assert route is not None
        path_params = dict(scope.get("path_params", {}))
        for key, value in params.items():
            path_params[key] = entry.convertors[key].convert(value)
        scope.setdefault("router", self.router)
        scope["endpoint"] = route.endpoint
        scope["path_params"] = path_params
        scope["route"] = route
        if entry.included_router is not None:
            fastapi_scope = scope.setdefault(_FASTAPI_SCOPE_KEY, {})
            fastapi_scope[_INCLUDED_ROUTER_KEY] = entry.included_router
            fastapi_scope[_ROUTE_CONTEXT_KEY] = entry.context
        await route.handle(scope, receive, send)

    def _build(self) -> None:
        entries = list(_entries(self.router.routes, None))
        by_index: defaultdict[Index, list[tuple[int, _Entry]]] = defaultdict(list)
        unindexed: list[tuple[int, _Entry]] = []
        for order, (path_format, entry) in enumerate(entries):
            index = _index_of(path_format)
            (unindexed if index is None else by_index[index]).append((order, entry))
        self._unindexed = tuple(entry for _, entry in unindexed)
        self._by_index = {
            index: tuple(entry for _, entry in sorted(indexed + unindexed, key=lambda e: e[0]))
            for index, indexed in by_index.items()
        }


def install_dispatch(router: APIRouter) -> None:
    """Put the table in front of ``router``, unless the router uses what the table does not
    model (router-level middleware or limits), where it keeps its own walk."""
    if router.middleware_stack != router.app or router.form_limits:
        return
    router.middleware_stack = Dispatch(router)


def _entries(routes: list[BaseRoute], included_router: BaseRoute | None) -> Any:
    """(path format, entry) for each route in the router's order, included routers inlined."""
    for route in routes:
        candidates = getattr(route, "effective_candidates", None)
        if candidates is not None:
            context = route.include_context  # type: ignore[attr-defined]
            if context.form_limits or context.max_body_size is not None:
                yield _unmodelled(None)
                continue
            for candidate in candidates():
                if hasattr(candidate, "effective_candidates"):
                    yield from _entries([candidate], candidate)
                    continue
                original = candidate.original_route
                if isinstance(original, APIRoute):
                    yield candidate.path_format, _entry(candidate, original, route, candidate)
                else:
                    yield _unmodelled(getattr(candidate, "path_format", None))
        elif isinstance(route, APIRoute):
            yield route.path_format, _entry(route, route, included_router, None)
        else:
            yield _unmodelled(getattr(route, "path_format", None))


def _entry(source: Any, route: APIRoute, included_router: BaseRoute | None, context: Any) -> _Entry:
    return _Entry(
        regex=source.path_regex,
        convertors=source.param_convertors,
        methods=frozenset(source.methods or ()),
        route=route,
        included_router=included_router,
        context=context,
    )


def _unmodelled(path_format: str | None) -> tuple[str, _Entry]:
    """A route the table leaves to the router, taken for every path that starts as its own
    (a mount's path also without its slash); without a path, for every path."""
    literal = (path_format or "").partition("{")[0].removesuffix("/")
    return literal + "{", _Entry(re.compile(re.escape(literal)), {}, frozenset(), None, None, None)


def _index_of(path_format: str) -> Index | None:
    """The index entry of every path this route can take, or None if a parameter may stand in
    its first segments."""
    segments = tuple(path_format.split("/", _INDEXED_SEGMENTS)[:_INDEXED_SEGMENTS])
    if any("{" in segment for segment in segments):
        return None
    return segments
