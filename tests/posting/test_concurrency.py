"""Races: two requests at once for the same receipt identifier or idempotency key.

Run on both backends; on PostgreSQL the requests really overlap in the database (the server
handles them on separate threads and connections), so this exercises the advisory locks and the
primary key behind them.
"""

from __future__ import annotations

import threading
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from sqlalchemy import func, select

from kuitti.models import Receipt
from kuitti.services import Services
from tests.conftest import LiveServer
from tests.factories import auth, make_partner, receipt_doc, token_body

RACERS = 8


def race(url: str, requests: list[tuple[dict[str, Any], dict[str, str]]]) -> list[httpx.Response]:
    """Send every request at the same moment, each on its own connection."""
    barrier = threading.Barrier(len(requests))

    def send(body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        with httpx.Client(base_url=url, timeout=30) as http:
            barrier.wait()
            return http.post("/api/v1/receipts/", json=body, headers=headers)

    with ThreadPoolExecutor(len(requests)) as pool:
        return list(pool.map(lambda args: send(*args), requests))


def stored(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(Receipt)) or 0


def test_different_receipts_racing_for_one_identifier(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "till-1-0001"}
    bodies = [token_body(receipt_doc(receiptNumber=f"R-{i}"), token) for i in range(RACERS)]
    responses = race(live_server.url, [(b, auth(merchant.api_key)) for b in bodies])
    outcomes = Counter(
        r.json()["error"] if r.status_code == 400 else r.status_code for r in responses
    )
    assert outcomes == {200: 1, "duplicate_receipt_id": RACERS - 1}
    assert stored(services) == 1


def test_same_receipt_resent_concurrently_is_stored_once(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "till-1-0002"}
    body = token_body(receipt_doc(), token)
    responses = race(live_server.url, [(body, auth(merchant.api_key))] * RACERS)
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["receipt_id"] for r in responses}) == 1
    assert stored(services) == 1


def test_idempotency_key_racing(live_server: LiveServer, services: Services) -> None:
    merchant = make_partner(services)
    headers = {**auth(merchant.api_key), "Idempotency-Key": "pos-7-000123"}
    responses = race(live_server.url, [(receipt_doc(), headers)] * RACERS)
    assert {r.status_code for r in responses} == {200}
    assert len({r.json()["receipt_id"] for r in responses}) == 1
    assert stored(services) == 1


def test_more_posts_at_once_than_the_pool_has_connections(
    live_server: LiveServer, services: Services
) -> None:
    """A request holds one connection at a time: authenticating through the request's session
    and then writing through a unit of its own never waits for a second connection while it
    keeps the first (forty posts against the test pool of twenty used to wait out its timeout).
    Card routes authenticate the same way (``partners.keys.key_holder``, then the connection
    handed back)."""
    merchant = make_partner(services)
    posts = [(receipt_doc(receiptNumber=f"R-{i}"), auth(merchant.api_key)) for i in range(40)]
    responses = race(live_server.url, posts)
    assert [r.status_code for r in responses] == [200] * len(posts)
    assert stored(services) == len(posts)
