"""Every 405 names the methods its path takes in ``Allow`` (RFC 9110 §15.5.6), in the error
shape: every route of the app is asked with every method it does not take."""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from starlette.convertors import IntegerConvertor, UUIDConvertor

from kuitti.app import create_app
from kuitti.front import FRONT_ROUTES
from kuitti.services import Services

METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def routes_of(routes: list[Any]) -> Iterator[Any]:
    """Every route, those of included routers (FastAPI's ``effective_candidates``) among them."""
    for route in routes:
        if hasattr(route, "effective_candidates"):
            yield from routes_of(route.effective_candidates())
        elif hasattr(route, "path_regex"):
            yield route


def every_path(services: Services) -> dict[str, set[str]]:
    """A concrete path for each route template of the app, and the methods of every route
    declared with that template."""
    app = create_app(services.settings, db=services.db, clock=services.clock)
    methods: defaultdict[str, set[str]] = defaultdict(set)
    for route in routes_of([*FRONT_ROUTES, *app.router.routes]):
        if not getattr(route, "methods", None):
            continue
        path = route.path
        for name, convertor in route.param_convertors.items():
            if isinstance(convertor, UUIDConvertor):
                value = str(uuid.UUID(int=1))
            elif isinstance(convertor, IntegerConvertor):
                value = "1"
            else:
                value = "p4r4m"
            path = path.replace("{" + name + "}", value).replace("{" + name + ":path}", value)
            path = path.replace("{" + name + ":uuid}", value).replace("{" + name + ":int}", value)
        methods[path] |= route.methods
    return dict(methods)


def test_every_405_says_which_methods_its_path_takes(
    client: httpx.Client, services: Services
) -> None:
    paths = every_path(services)
    assert len(paths) > 20
    answered = []
    for path, allowed in sorted(paths.items()):
        for method in METHODS:
            if method in allowed:
                continue
            answer = client.request(method, path, headers={"Content-Type": "application/json"})
            if answer.status_code != 405:
                continue
            answered.append((method, path))
            assert answer.headers.get("allow") == ", ".join(sorted(allowed)), (method, path)
            if method != "HEAD":  # a HEAD answer has no body
                assert answer.json()["error"] == "method_not_allowed", (method, path)
    assert len(answered) > 100


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("PUT", "/api/v1/receipts/", "GET, POST"),
        ("DELETE", "/api/v1/receipts/validate", "POST"),
        ("POST", "/healthz", "GET"),
        ("DELETE", "/openapi.json", "GET, HEAD"),
    ],
)
def test_a_path_with_several_routes_names_all_their_methods(
    client: httpx.Client, method: str, path: str, allow: str
) -> None:
    answer = client.request(method, path)
    assert answer.status_code == 405
    assert answer.headers["allow"] == allow
