"""The same post arriving at several processes' writers at once.

Each racer is an ``Ingest`` of its own (what each server process has), run on an event loop of
its own in a thread of its own, so their writers' transactions really overlap in the database.
Every loser must get the winner's answer (the same receipt for a resend or an idempotent
replay) or the documented conflict, never a 500, and exactly one receipt is stored.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
from sqlalchemy import func, select

from kuitti.errors import KuittiError
from kuitti.models import Receipt
from kuitti.posting.ingest import Ingest
from kuitti.services import Services
from tests.factories import make_partner, receipt_doc, token_body

RACERS = 4
ROUNDS = 40

Answer = tuple[int, Any]


def race(services: Services, posts: list[tuple[bytes, str | None]], api_key: str) -> list[Answer]:
    """Post each body (with its Idempotency-Key) through an ``Ingest`` of its own, at once."""
    barrier = threading.Barrier(len(posts))

    def post(body: bytes, idempotency_key: str | None) -> Answer:
        ingest = Ingest(services)
        barrier.wait()
        try:
            return asyncio.run(
                ingest.post(
                    body,
                    authorization=f"Token {api_key}",
                    content_type="application/json",
                    idempotency_key=idempotency_key,
                )
            )
        except KuittiError as error:
            return error.status_code, error.code
        except Exception as error:  # what the HTTP layer would answer with 500
            return 500, type(error).__name__

    with ThreadPoolExecutor(len(posts)) as pool:
        return list(pool.map(lambda args: post(*args), posts))


def stored(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(Receipt)) or 0


def rounds(
    services: Services,
    make_posts: Callable[[int], list[tuple[bytes, str | None]]],
    check: Callable[[list[Answer]], None],
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    for number in range(ROUNDS):
        answers = race(services, make_posts(number), merchant.api_key)
        check(answers)
        assert stored(services) == number + 1, answers


def same_answer(answers: list[Answer]) -> None:
    assert answers[0][0] == 200, answers
    assert all(answer == answers[0] for answer in answers), answers


def test_one_resend_raced_by_several_writers(services: Services) -> None:
    def posts(number: int) -> list[tuple[bytes, str | None]]:
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": f"till-1-{number:04}"}
        body = orjson.dumps(token_body(receipt_doc(receiptNumber=f"R-{number}"), token))
        return [(body, None)] * RACERS

    rounds(services, posts, same_answer)


def test_one_idempotent_post_raced_by_several_writers(services: Services) -> None:
    def posts(number: int) -> list[tuple[bytes, str | None]]:
        body = orjson.dumps(receipt_doc(receiptNumber=f"R-{number}"))
        return [(body, f"pos-1-{number:04}")] * RACERS

    rounds(services, posts, same_answer)


def one_winner(conflict: Answer) -> Callable[[list[Answer]], None]:
    def check(answers: list[Answer]) -> None:
        winners = [answer for answer in answers if answer[0] == 200]
        assert len(winners) == 1, answers
        assert sorted(answers, key=str).count(conflict) == len(answers) - 1, answers

    return check


def test_different_receipts_raced_for_one_identifier(services: Services) -> None:
    def posts(number: int) -> list[tuple[bytes, str | None]]:
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": f"till-2-{number:04}"}
        return [
            (orjson.dumps(token_body(receipt_doc(receiptNumber=f"R-{number}-{i}"), token)), None)
            for i in range(RACERS)
        ]

    rounds(services, posts, one_winner((400, "duplicate_receipt_id")))


def test_different_bodies_raced_for_one_idempotency_key(services: Services) -> None:
    def posts(number: int) -> list[tuple[bytes, str | None]]:
        return [
            (orjson.dumps(receipt_doc(receiptNumber=f"R-{number}-{i}")), f"pos-2-{number:04}")
            for i in range(RACERS)
        ]

    rounds(services, posts, one_winner((409, "idempotency_key_reused")))


def test_plain_and_delivered_receipts_raced_for_one_identifier(services: Services) -> None:
    """Half the racers need only rows of their own; the other half also deliver by e-mail, so
    they are stored one by one (``create_receipt``) and may lose to the others' plain
    inserts."""

    def posts(number: int) -> list[tuple[bytes, str | None]]:
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": f"till-3-{number:04}"}
        email = {"type": "EMAIL", "value": f"asiakas{number}@example.com"}
        return [
            (
                orjson.dumps(
                    token_body(receipt_doc(receiptNumber=f"R-{number}-{i}"), token, email)
                    if i % 2
                    else token_body(receipt_doc(receiptNumber=f"R-{number}-{i}"), token)
                ),
                None,
            )
            for i in range(RACERS)
        ]

    rounds(services, posts, one_winner((400, "duplicate_receipt_id")))
