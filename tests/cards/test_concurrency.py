"""A receipt's matching step and its transaction arriving at the same moment, on real threads
against the real server: exactly one match each time (on PostgreSQL the per-merchant-id advisory
lock decides; SQLite serialises writers)."""

from __future__ import annotations

from typing import Any

import httpx

from tests.cards.support import MID, PAID_AT, World, iso, race
from tests.factories import auth, receipt_doc

ROUNDS = 12


def _auth(code: str) -> dict[str, Any]:
    return {
        "partner_card_id": "card-1",
        "transaction_type": "auth",
        "amount": 849,
        "currency": "EUR",
        "timestamp": iso(PAID_AT),
        "merchant_id": MID,
        "merchant_name": "Kauppa",
        "authorization_code": code,
    }


class TestSimultaneousArrival:
    def test_receipt_and_transaction_together_match_exactly_once(self, world: World) -> None:
        """The receipt is posted while the transaction is, then the worker's step races the
        next transaction."""
        world.enroll()
        url = world.client.base_url
        with (
            httpx.Client(base_url=url, timeout=30) as a,
            httpx.Client(base_url=url, timeout=30) as b,
        ):
            for n in range(ROUNDS):
                code = f"C{n:05d}"
                doc = receipt_doc()
                doc["payments"][0]["attributes"]["authorizationCode"] = code
                txn = _auth(code)
                receipt_answer, txn_answer = race(
                    lambda doc=doc: a.post(  # type: ignore[misc]
                        "/api/v1/receipts/", json=doc, headers=auth(world.merchant.api_key)
                    ),
                    lambda txn=txn: b.post(  # type: ignore[misc]
                        "/api/v1/card-transactions/", json=txn, headers=auth(world.issuer.api_key)
                    ),
                )
                assert receipt_answer.status_code == 200, receipt_answer.text
                assert txn_answer.status_code == 200, txn_answer.text
                world.settle()
                receipt = receipt_answer.json()["receipt_id"]
                assert len(world.matches(receipt)) == 1, f"round {n}"
                assert world.owners(receipt) == {world.user.id}
        assert len(world.matches()) == ROUNDS
        assert len(world.webhooks("receipt_notification")) == ROUNDS

    def test_the_matching_step_and_the_transaction_together_match_exactly_once(
        self, world: World
    ) -> None:
        world.enroll()
        url = world.client.base_url
        with httpx.Client(base_url=url, timeout=30) as b:
            for n in range(ROUNDS):
                code = f"W{n:05d}"
                receipt = world.receipt(authorizationCode=code, match=False)
                txn = _auth(code)
                [_, txn_answer] = race(
                    world.settle,
                    lambda txn=txn: b.post(  # type: ignore[misc]
                        "/api/v1/card-transactions/", json=txn, headers=auth(world.issuer.api_key)
                    ),
                )
                assert txn_answer.status_code == 200, txn_answer.text
                world.settle()
                assert len(world.matches(receipt)) == 1, f"round {n}"
        assert len(world.webhooks("receipt_notification")) == ROUNDS

    def test_two_receipts_racing_for_one_purchase_take_it_once(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code="RACE01")
        doc = receipt_doc()
        doc["payments"][0]["attributes"]["authorizationCode"] = "RACE01"
        url = world.client.base_url
        with (
            httpx.Client(base_url=url, timeout=30) as a,
            httpx.Client(base_url=url, timeout=30) as b,
        ):
            answers = race(
                lambda: a.post("/api/v1/receipts/", json=doc, headers=auth(world.merchant.api_key)),
                lambda: b.post("/api/v1/receipts/", json=doc, headers=auth(world.merchant.api_key)),
            )
        assert [x.status_code for x in answers] == [200, 200]
        race(world.settle, world.settle)  # two workers' steps
        assert len(world.matches()) == 1
