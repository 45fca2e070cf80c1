"""The front door (``kuitti.front``): its table answers the receipt post with the same answers,
headers, access line and metrics as a route behind the router; every other request on its path
is still the router's; and no route of the router is a stand-in for a front door route."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.routing import Route

from kuitti.app import ROUTERS, create_app
from kuitti.front import FRONT_DOCUMENTED, FRONT_ROUTES
from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.factories import auth, make_partner, metric, receipt_doc
from tests.test_dispatch import _answer

URL = "/api/v1/receipts/"


def test_the_router_has_no_stand_in_for_a_front_door_route(services: Services) -> None:
    """FastAPI's router itself (the middleware and the front door bypassed) does not take a
    front door route's method and path: its 405 is the router's answer to a method it lacks."""
    app = create_app(services.settings, db=services.db, clock=services.clock)
    assert _answer(app, "POST", URL)[0] == 401  # through the front door
    for route in FRONT_ROUTES:
        for method in route.methods or ():
            assert _answer(app.router, method, route.path)[0] == 405


def test_every_front_door_route_is_documented(services: Services) -> None:
    app = create_app(services.settings, db=services.db, clock=services.clock)
    document = app.openapi()
    for route in FRONT_ROUTES:
        for method in route.methods or ():
            assert method.lower() in document["paths"][route.path]
    assert all(route not in app.routes for route in FRONT_DOCUMENTED)


def test_every_path_is_routed_in_one_form(services: Services) -> None:
    """Trailing slashes are the middleware's (``TrailingSlashes``), not twin routes."""
    app = create_app(services.settings, db=services.db, clock=services.clock)
    routes = [*FRONT_ROUTES, *app.routes, *(r for router in ROUTERS for r in router.routes)]
    paths = {route.path for route in routes if isinstance(route, Route)}
    assert len(paths) > 20
    assert not {path + "/" for path in paths} & paths


@pytest.mark.parametrize(
    ("path", "status"),
    [
        (URL, 401),
        (URL.removesuffix("/"), 401),
        (URL + "/", 404),
        ("/api/v1/receipts/validate/", 401),
        ("/api/v1/cards/some-card", 401),
        ("/api/", 404),
        ("/healthz/", 404),
    ],
)
def test_both_forms_of_an_api_path_answer(client: httpx.Client, path: str, status: int) -> None:
    method = "DELETE" if "some-card" in path else "POST"
    answer = client.request(method, path, json=receipt_doc(), follow_redirects=False)
    assert answer.status_code == status


@pytest.mark.parametrize("path", [URL, URL.removesuffix("/")])
def test_a_post_is_counted_and_timed_under_its_route(
    client: httpx.Client, services: Services, path: str
) -> None:
    merchant = make_partner(services)
    ok = f'kuitti_http_requests_total{{method="POST",route="{URL}",status="200"}}'
    refused = f'kuitti_http_requests_total{{method="POST",route="{URL}",status="401"}}'
    timed = f'kuitti_http_request_duration_seconds_count{{method="POST",route="{URL}"}}'
    before = [metric(client, sample) for sample in (ok, refused, timed)]
    answer = client.post(
        path, json=receipt_doc(), headers={**auth(merchant.api_key), "X-Request-ID": "post-1"}
    )
    assert answer.status_code == 200, answer.text
    assert answer.headers["x-request-id"] == "post-1"
    assert answer.headers["content-type"] == "application/json"
    assert client.post(path, json=receipt_doc(), headers=auth("nope")).status_code == 401
    after = [metric(client, sample) for sample in (ok, refused, timed)]
    assert [a - b for a, b in zip(after, before, strict=True)] == [1, 1, 2]


def test_errors_keep_their_shape_and_headers(client: httpx.Client, services: Services) -> None:
    merchant = make_partner(services)
    unauthorized = client.post(URL, json=receipt_doc())
    assert unauthorized.status_code == 401
    assert unauthorized.headers["www-authenticate"] == "Token"
    assert unauthorized.json() == {
        "error": "unauthorized",
        "decription": "Send the partner API key as 'Authorization: Token <API_KEY>'.",
    }
    several = client.post(
        URL,
        json=receipt_doc(receiptNumber=None, currencyISOCode=None),
        headers=auth(merchant.api_key),
    )
    assert several.status_code == 400
    errors = several.json()
    assert isinstance(errors, list)
    assert len(errors) >= 2
    assert all(set(error) == {"error", "decription"} for error in errors)
    reader = make_partner(services, PartnerRole.CARD_ISSUER)
    forbidden = client.post(URL, json=receipt_doc(), headers=auth(reader.api_key))
    assert forbidden.status_code == 403
    assert forbidden.json()["error"] == "forbidden"


def test_the_first_of_repeated_headers_counts(client: httpx.Client, services: Services) -> None:
    """As Starlette's ``Headers.get`` reads them for every other route."""
    merchant = make_partner(services)
    right, wrong = auth(merchant.api_key)["Authorization"], "Token not-a-key"
    body = httpx.Request("POST", "http://x", json=receipt_doc()).content
    json_type = ("content-type", "application/json")
    first_right = [("authorization", right), ("authorization", wrong), json_type]
    first_wrong = [("authorization", wrong), ("authorization", right), json_type]
    assert client.post(URL, content=body, headers=first_right).status_code == 200
    assert client.post(URL, content=body, headers=first_wrong).status_code == 401
    not_json = [("authorization", right), ("content-type", "text/plain"), json_type]
    assert client.post(URL, content=body, headers=not_json).status_code == 415


@pytest.mark.parametrize("method", ["GET", "PUT", "DELETE", "PATCH", "HEAD", "OPTIONS"])
def test_other_methods_on_the_path_are_the_routers(client: httpx.Client, method: str) -> None:
    answer = client.request(method, URL, headers=auth("nope"))
    assert answer.status_code == (401 if method == "GET" else 405)
    if method not in ("GET", "HEAD"):
        assert answer.json()["error"] == "method_not_allowed"


def _post_under_root_path(app: FastAPI, key: str) -> tuple[int, Any]:
    """A post to an app served under a path prefix (``uvicorn --root-path /kuitti``)."""
    transport = httpx.ASGITransport(app=app, root_path="/kuitti")

    async def post() -> httpx.Response:
        async with httpx.AsyncClient(transport=transport, base_url="http://kuitti.test") as c:
            return await c.post("/kuitti" + URL, json=receipt_doc(), headers=auth(key))

    answer = asyncio.run(post())
    return answer.status_code, answer.json()


def test_a_post_under_a_root_path(services: Services) -> None:
    merchant = make_partner(services)
    app = create_app(services.settings, db=services.db, clock=services.clock)
    status, body = _post_under_root_path(app, merchant.api_key)
    assert status == 200, body
    assert set(body) >= {"receipt_id", "receipt_web_url"}
