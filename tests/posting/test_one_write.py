"""A post that delivers through its tokens writes its receipt row once: the row is inserted with
its final token statuses (and a return's link to its original), never updated afterwards
(docs/delivery.md, "Tokens"). On PostgreSQL an update is a second heap tuple of the receipt."""

from __future__ import annotations

import uuid
from typing import Any

import httpx
import pytest

from kuitti.clock import FrozenClock
from kuitti.models import Card, Receipt
from kuitti.services import Services
from tests.cards.support import World, connect_app, make_world
from tests.delivery.support import mail_rows, owners
from tests.factories import auth, product_row, receipt_doc, token_body
from tests.posting.test_write_plans import statements_sent  # the app's engine's statements

URL = "/api/v1/receipts/"


@pytest.fixture
def world(services: Services, client: httpx.Client, clock: FrozenClock) -> World:
    return make_world(services, client, clock)


def receipt_writes(statements: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """The INSERTs and UPDATEs of ``receipts`` among ``statements`` (statement, parameters)."""
    return [
        (statement, parameters)
        for statement, parameters in statements
        if statement.split(None, 3)[:3]
        in (["INSERT", "INTO", "receipts"], ["UPDATE", "receipts", "SET"])
    ]


def post(world: World, body: dict[str, Any]) -> dict[str, Any]:
    answer = world.client.post(URL, json=body, headers=auth(world.merchant.api_key))
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def stored(services: Services, receipt_id: str) -> Receipt:
    with services.db.session(write=False) as session:
        receipt = session.get(Receipt, uuid.UUID(receipt_id))
        assert receipt is not None
        session.expunge(receipt)
        return receipt


def kinds(writes: list[tuple[str, Any]]) -> list[str]:
    return [statement.split(None, 1)[0] for statement, _ in writes]


@pytest.mark.parametrize("kind", ["EMAIL", "CARD"])
def test_a_delivering_post_inserts_its_receipt_once(world: World, kind: str) -> None:
    connect_app(world.services, world.user)  # delivery also notifies the user's app
    if kind == "CARD":
        card_id = world.enroll("card-1")
        with world.services.db.session(write=False) as session:
            card = session.get(Card, uuid.UUID(card_id))
            assert card is not None
            token = {"type": "CARD", "id": card.partner_card_id, "value": card.masked_pan}
    else:
        token = {"type": "EMAIL", "value": world.user.email}
    body = token_body(
        receipt_doc(),
        token,
        {"type": "EMAIL", "value": "nobody@example.com"},
        {"type": "EMAIL", "value": world.user.email.upper()},  # the same user again
    )
    with statements_sent(world.services) as statements:
        data = post(world, body)
    writes = receipt_writes(statements)
    expected = [
        {"type": kind, "status": "delivered"},
        {"type": "EMAIL", "status": "email_queued"},
        {"type": "EMAIL", "status": "delivered"},
    ]
    assert data["tokens"] == expected
    assert kinds(writes) == ["INSERT"], writes
    assert stored(world.services, data["receipt_id"]).token_statuses == expected
    assert owners(world.services, data["receipt_id"]) == [world.user.id]
    mailed = sorted(m.to_address.lower() for m in mail_rows(world.services))
    assert mailed == ["maija@example.com", "nobody@example.com"]  # one e-mail an address


def test_a_return_inserts_its_receipt_once_and_updates_only_its_original(world: World) -> None:
    purchase = post(world, token_body(receipt_doc(), {"type": "EMAIL", "value": world.user.email}))
    doc = receipt_doc(
        [product_row(quantity=-1)],
        type="RETURN",
        receiptNumber="R-2026-0107",
        receiptTimeStamp="2026-01-16T10:00:00+02:00",
    )
    doc["originalReceiptId"] = purchase["receipt_id"]
    with statements_sent(world.services) as statements:
        data = post(world, token_body(doc, {"type": "EMAIL", "value": world.user.email}))
    writes = receipt_writes(statements)
    assert data["original"] == {"status": "linked", "receipt_id": purchase["receipt_id"]}
    assert data["tokens"] == [{"type": "EMAIL", "status": "delivered"}]
    # The one update is the original's count of returns.
    assert kinds(writes) == ["INSERT", "UPDATE"], writes
    update_parameters = writes[1][1]
    assert str(data["receipt_id"]) not in str(update_parameters)
    assert uuid.UUID(data["receipt_id"]).hex not in str(update_parameters)
    receipt = stored(world.services, data["receipt_id"])
    assert receipt.original_receipt_id == uuid.UUID(purchase["receipt_id"])
    assert receipt.token_statuses == data["tokens"]
    assert stored(world.services, purchase["receipt_id"]).return_count == 1
    assert owners(world.services, data["receipt_id"]) == [world.user.id]
