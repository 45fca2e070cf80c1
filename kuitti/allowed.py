"""The methods a path takes, for the ``Allow`` header every 405 carries (RFC 9110 §15.5.6).

Starlette's route answers a method it does not take with the methods of that one route, but a
path can be served by several routes (the receipt list's GET and the receipt post share one), so
the answer is gathered from every route whose path matches, included routers' routes among them
(FastAPI keeps those behind ``effective_candidates``, as ``kuitti.dispatch`` reads them)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from starlette._utils import get_route_path
from starlette.types import Scope


def allowed_methods(routes: Iterable[Any], scope: Scope) -> str:
    """``GET, HEAD, POST``: the methods of every route that takes the path of ``scope``."""
    path = get_route_path(scope)
    methods: set[str] = set()
    for route in _flat(routes):
        regex = getattr(route, "path_regex", None)
        if regex is not None and getattr(route, "methods", None) and regex.match(path):
            methods |= set(route.methods)
    return ", ".join(sorted(methods))


def _flat(routes: Iterable[Any]) -> Iterator[Any]:
    for route in routes:
        candidates = getattr(route, "effective_candidates", None)
        yield from _flat(candidates()) if candidates is not None else (route,)
