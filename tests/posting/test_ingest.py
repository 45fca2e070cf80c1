"""The receipt post's writer: postings committed together, and what may not change because of it.

Receipts are held back from the database (the test holds the write lock: SQLite's single
writer, or a PostgreSQL table lock) until every request of a test waits in the writer's queue,
so they really are written as one batch; then the lock is let go.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import httpx
import orjson
import pytest
from fastapi import FastAPI
from sqlalchemy import func, select, text

from kuitti.metrics import INGEST_BATCH
from kuitti.models import IdempotencyRecord, PartnerRole, Receipt
from kuitti.partners.keys import key_digest, look_up_holder
from kuitti.partners.service import NewPartner
from kuitti.posting import ingest as ingest_module
from kuitti.posting.checks import check_body
from kuitti.posting.ingest import GATHER_AT_LEAST, Ingest
from kuitti.posting.service import Posting, prepare_posting
from kuitti.services import Services
from kuitti.signatures import Signer
from tests.conftest import LiveServer
from tests.factories import auth, make_partner, receipt_doc, token_body
from tests.test_cli import run, run_json

REFUSED = "REFUSED"
ERROR_500 = {
    "error": "internal_error",
    "decription": "Something went wrong on our side; nothing was saved.",
}


def ingest_of(server: LiveServer) -> Ingest:
    app = server.server.config.app
    assert isinstance(app, FastAPI)
    ingest: Ingest = app.state.ingest
    return ingest


def stored_numbers(services: Services) -> list[str]:
    with services.db.session(write=False) as session:
        return sorted(session.scalars(select(Receipt.receipt_number)))


@contextlib.contextmanager
def writes_held(services: Services) -> Iterator[None]:
    """No receipt is written while the block runs."""
    with services.db.session() as session:
        if services.db.dialect == "postgresql":
            session.execute(text("LOCK TABLE receipts IN EXCLUSIVE MODE"))
        yield


def wait_until(condition: Callable[[], bool]) -> None:
    """Wait (at most 30 s) for something another thread does; no fixed delay."""
    changed = threading.Event()
    for _ in range(3000):
        if condition():
            return
        changed.wait(0.01)
    raise AssertionError("the condition never held")


def post_as_one_batch(
    server: LiveServer, services: Services, requests: list[tuple[dict[str, Any], dict[str, str]]]
) -> list[httpx.Response]:
    """Send the requests while writes are held, let go once all of them wait in the writer."""
    ingest = ingest_of(server)

    def send(body: dict[str, Any], headers: dict[str, str]) -> httpx.Response:
        with httpx.Client(base_url=server.url, timeout=60) as http:
            return http.post("/api/v1/receipts/", json=body, headers=headers)

    with ThreadPoolExecutor(len(requests)) as pool:
        with writes_held(services):
            futures: list[Future[httpx.Response]] = [
                pool.submit(send, body, headers) for body, headers in requests
            ]
            wait_until(lambda: ingest.in_flight == len(requests))
        return [future.result() for future in futures]


def post_numbered(
    server: LiveServer, services: Services, numbers: list[str]
) -> dict[str, httpx.Response]:
    """One receipt per number, from one merchant, as one batch; the answers by number."""
    merchant = make_partner(services)
    bodies = [(receipt_doc(receiptNumber=n), auth(merchant.api_key)) for n in numbers]
    return dict(zip(numbers, post_as_one_batch(server, services, bodies), strict=True))


@pytest.fixture
def refusing_trigger(services: Services) -> Iterator[Callable[[str], None]]:
    """Installs a trigger that makes the database refuse the receipt numbered ``REFUSED``,
    when it is inserted (``insert``) or, PostgreSQL only, when it is committed (``commit``)."""
    postgresql = services.db.dialect == "postgresql"

    def install(when: str) -> None:
        with services.db.engine.begin() as connection:
            if not postgresql:
                connection.execute(
                    text(
                        "CREATE TRIGGER refuse_receipt BEFORE INSERT ON receipts "
                        f"WHEN NEW.receipt_number = '{REFUSED}' "
                        "BEGIN SELECT RAISE(ABORT, 'refused by the test'); END"
                    )
                )
                return
            connection.execute(
                text(
                    "CREATE FUNCTION refuse_receipt() RETURNS trigger LANGUAGE plpgsql AS $$ "
                    f"BEGIN IF NEW.receipt_number = '{REFUSED}' THEN "
                    "RAISE EXCEPTION 'refused by the test'; END IF; RETURN NEW; END $$"
                )
            )
            if when == "insert":
                connection.execute(
                    text(
                        "CREATE TRIGGER refuse_receipt BEFORE INSERT ON receipts "
                        "FOR EACH ROW EXECUTE FUNCTION refuse_receipt()"
                    )
                )
            else:
                connection.execute(
                    text(
                        "CREATE CONSTRAINT TRIGGER refuse_receipt AFTER INSERT ON receipts "
                        "DEFERRABLE INITIALLY DEFERRED "
                        "FOR EACH ROW EXECUTE FUNCTION refuse_receipt()"
                    )
                )

    yield install
    with services.db.engine.begin() as connection:
        if postgresql:
            connection.execute(text("DROP TRIGGER IF EXISTS refuse_receipt ON receipts"))
            connection.execute(text("DROP FUNCTION IF EXISTS refuse_receipt()"))
        else:
            connection.execute(text("DROP TRIGGER IF EXISTS refuse_receipt"))


def till(number: int) -> dict[str, str]:
    return {"type": "RECEIPT_ID", "namespace": "kauppa", "value": f"till-{number}"}


def test_receipts_waiting_together_are_stored_and_answered_together(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    requests = [
        (token_body(receipt_doc(receiptNumber=f"R-{i}"), till(i)), auth(merchant.api_key))
        for i in range(6)
    ]
    responses = post_as_one_batch(live_server, services, requests)
    assert [r.status_code for r in responses] == [200] * 6
    ids = [uuid.UUID(r.json()["receipt_id"]) for r in responses]
    assert len(set(ids)) == 6
    assert {i.version for i in ids} == {7}  # time-ordered: a batch fills the same index pages
    assert stored_numbers(services) == [f"R-{i}" for i in range(6)]


def test_one_identifier_twice_in_a_batch_is_stored_once(
    live_server: LiveServer, services: Services
) -> None:
    """The same RECEIPT_ID three times in one batch, on two documents: whichever the writer
    takes first is stored; a post of the same document is a resend of it (200, the same id), a
    post of the other a duplicate, as when they come one after the other."""
    merchant = make_partner(services, namespaces=["kauppa"])
    numbers = ["R-1", "R-1", "R-2"]
    responses = post_as_one_batch(
        live_server,
        services,
        [
            (token_body(receipt_doc(receiptNumber=n), till(1)), auth(merchant.api_key))
            for n in numbers
        ],
    )
    [kept] = stored_numbers(services)
    ids = set()
    for number, response in zip(numbers, responses, strict=True):
        if number == kept:
            assert response.status_code == 200
            ids.add(response.json()["receipt_id"])
        else:
            assert response.status_code == 400
            assert response.json()["error"] == "duplicate_receipt_id"
    assert len(ids) == 1


def test_one_idempotency_key_twice_in_a_batch_replays_the_first_answer(
    live_server: LiveServer, services: Services
) -> None:
    merchant = make_partner(services)
    body = receipt_doc(receiptNumber="R-1")
    headers = {**auth(merchant.api_key), "Idempotency-Key": "k-1"}
    responses = post_as_one_batch(live_server, services, [(body, headers)] * 3)
    assert [r.status_code for r in responses] == [200] * 3
    assert len({r.content for r in responses}) == 1
    assert stored_numbers(services) == ["R-1"]
    with services.db.session(write=False) as session:
        assert session.scalar(select(func.count()).select_from(IdempotencyRecord)) == 1


def test_a_receipt_the_database_refuses_fails_alone(
    live_server: LiveServer, services: Services, refusing_trigger: Callable[[str], None]
) -> None:
    refusing_trigger("insert")
    answers = post_numbered(live_server, services, ["R-1", "R-2", REFUSED, "R-3"])
    assert answers[REFUSED].status_code == 500
    assert answers[REFUSED].json() == ERROR_500
    assert all(answers[n].status_code == 200 for n in ("R-1", "R-2", "R-3"))
    assert stored_numbers(services) == ["R-1", "R-2", "R-3"]


def test_a_commit_that_fails_answers_no_200_for_what_it_held(
    live_server: LiveServer, services: Services, refusing_trigger: Callable[[str], None]
) -> None:
    """The batch's commit fails (a deferred constraint): nothing it held was answered 200 before
    it; the receipts that can be stored are then stored one by one, and only they get 200."""
    if services.db.dialect != "postgresql":
        pytest.skip("SQLite has no constraint checked only at commit that a test can add")
    refusing_trigger("commit")
    answers = post_numbered(live_server, services, ["R-1", REFUSED, "R-2"])
    assert {n: r.status_code for n, r in answers.items()} == {"R-1": 200, REFUSED: 500, "R-2": 200}
    assert answers[REFUSED].json() == ERROR_500
    with services.db.session(write=False) as session:
        for number in ("R-1", "R-2"):
            receipt = session.get(Receipt, uuid.UUID(answers[number].json()["receipt_id"]))
            assert receipt is not None
            assert receipt.receipt_number == number
    assert stored_numbers(services) == ["R-1", "R-2"]


class TestRememberedKeyHolders:
    """A key holder remembered by the process never outlives a change of its partner."""

    @pytest.fixture
    def merchant(self, client: httpx.Client, services: Services) -> NewPartner:
        """A merchant whose key holder the server remembers: it has posted once."""
        merchant = make_partner(services)
        posted = client.post(
            "/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key)
        )
        assert posted.status_code == 200
        return merchant

    def test_a_rotated_key_is_refused_at_once(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        headers = auth(merchant.api_key)
        run_json(services, "partner", "rotate", str(merchant.partner.id), "--secret", "api_key")
        refused = client.post(
            "/api/v1/receipts/", json=receipt_doc(receiptNumber="R-2"), headers=headers
        )
        assert refused.status_code == 401
        assert refused.json() == {
            "error": "unauthorized",
            "decription": "The API key is not valid.",
        }
        assert len(stored_numbers(services)) == 1

    def test_a_disabled_partner_gets_401_not_a_validation_error(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        headers = auth(merchant.api_key)
        assert run(services, "partner", "disable", str(merchant.partner.id)).exit_code == 0
        invalid = client.post("/api/v1/receipts/", json={"receipt": 1}, headers=headers)
        assert invalid.status_code == 401
        assert run(services, "partner", "enable", str(merchant.partner.id)).exit_code == 0
        again = client.post(
            "/api/v1/receipts/", json=receipt_doc(receiptNumber="R-2"), headers=headers
        )
        assert again.status_code == 200
        assert len(stored_numbers(services)) == 2


def test_the_checks_answer_in_their_order(client: httpx.Client, services: Services) -> None:
    """The route reads its headers itself; each check still answers before the next one's:
    401, 403, the Idempotency-Key's length (400, in FastAPI's words), 415, then the body."""
    merchant = make_partner(services)
    reader = make_partner(services, PartnerRole.APP, name="Lukija Oy")
    long_key = {"Idempotency-Key": "k" * 256, "Content-Type": "text/plain"}

    def post(headers: dict[str, str]) -> tuple[int, object]:
        response = client.post("/api/v1/receipts/", content=b"{", headers=headers)
        return response.status_code, response.json()

    assert post({**long_key, **auth(reader.api_key)}) == (
        403,
        {
            "error": "forbidden",
            "decription": "This API key's partner does not have the merchant role.",
        },
    )
    assert post({**long_key, **auth(merchant.api_key)}) == (
        400,
        {
            "error": "invalid_value",
            "decription": "header.idempotency-key: String should have at most 255 characters",
        },
    )
    assert (
        post(
            {"Idempotency-Key": "k" * 255, "Content-Type": "text/plain", **auth(merchant.api_key)}
        )[0]
        == 415
    )
    assert stored_numbers(services) == []


def _batch_metric(server: LiveServer) -> tuple[float, float]:
    """(transactions, receipt posts) of ``kuitti_ingest_batch_receipts`` so far."""
    values = {"count": 0.0, "sum": 0.0}
    for line in httpx.get(f"{server.url}/metrics").text.splitlines():
        name, _, value = line.rpartition(" ")
        for part in values:
            if name == f"kuitti_ingest_batch_receipts_{part}":
                values[part] = float(value)
    return values["count"], values["sum"]


def test_the_batch_metric_counts_transactions_and_their_receipts(
    live_server: LiveServer, services: Services
) -> None:
    # A first post makes this test's signing key (the tables were emptied since the server's
    # writer signed last), so that no posting below is signed again with a new key.
    assert post_numbered(live_server, services, ["B-first"])["B-first"].status_code == 200
    count_before, sum_before = _batch_metric(live_server)
    responses = post_numbered(live_server, services, [f"B-{i}" for i in range(5)])
    assert [r.status_code for r in responses.values()] == [200] * 5
    count, total = _batch_metric(live_server)
    assert total - sum_before == 5
    # The first post may start a transaction of its own before the others arrive.
    assert count - count_before in (1, 2)


def _batches_so_far() -> tuple[float, float]:
    """(transactions, receipt posts) of this process's ``kuitti_ingest_batch_receipts``."""
    values = {s.name: s.value for m in INGEST_BATCH.collect() for s in m.samples}
    return values["kuitti_ingest_batch_receipts_count"], values["kuitti_ingest_batch_receipts_sum"]


def _poster(services: Services) -> Callable[[Ingest, str], Coroutine[Any, Any, int]]:
    """A function that posts a receipt numbered as told through ``Ingest.post``, as the route
    does, and returns its status."""
    authorization = auth(make_partner(services).api_key)["Authorization"]

    async def post(ingest: Ingest, number: str) -> int:
        body = orjson.dumps(receipt_doc(receiptNumber=number))
        status, _ = await ingest.post(
            body,
            authorization=authorization,
            content_type="application/json",
            idempotency_key=None,
        )
        return status

    return post


async def _written_together(
    ingest: Ingest, post: Callable[[Ingest, str], Coroutine[Any, Any, int]]
) -> None:
    """A batch of ``GATHER_AT_LEAST`` postings: all of them join the queue before the writer's
    task first runs (their key holder is remembered, so none waits for a lookup)."""
    await post(ingest, "warm")
    before = _batches_so_far()
    statuses = await asyncio.gather(*(post(ingest, f"T-{i}") for i in range(GATHER_AT_LEAST)))
    assert statuses == [200] * GATHER_AT_LEAST
    count, total = _batches_so_far()
    assert (count - before[0], total - before[1]) == (1, GATHER_AT_LEAST)


def test_under_load_the_writer_lets_postings_gather_into_one_batch(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    post = _poster(services)

    async def scenario() -> None:
        ingest = Ingest(services)
        await _written_together(ingest, post)
        monkeypatch.setattr(ingest_module, "GATHER_SECONDS", 60)  # only the count ends the wait
        before = _batches_so_far()
        lone = asyncio.create_task(post(ingest, "lone"))
        while ingest.in_flight == 0:
            await asyncio.sleep(0)
        others = [post(ingest, f"U-{i}") for i in range(GATHER_AT_LEAST - 1)]
        statuses = await asyncio.wait_for(asyncio.gather(lone, *others), 30)
        assert statuses == [200] * GATHER_AT_LEAST
        count, total = _batches_so_far()
        assert (count - before[0], total - before[1]) == (1, GATHER_AT_LEAST)

    asyncio.run(scenario())
    assert len(stored_numbers(services)) == 2 * GATHER_AT_LEAST + 1


def test_a_lone_posting_is_written_at_once_and_after_load_waits_only_a_moment(
    services: Services, monkeypatch: pytest.MonkeyPatch
) -> None:
    post = _poster(services)

    async def scenario() -> None:
        monkeypatch.setattr(ingest_module, "GATHER_SECONDS", 60)
        ingest = Ingest(services)
        # No batch of GATHER_AT_LEAST yet: light load, nothing to wait for.
        assert await asyncio.wait_for(post(ingest, "first"), 30) == 200
        monkeypatch.setattr(ingest_module, "GATHER_SECONDS", 0.01)
        await _written_together(ingest, post)
        # Load gone: the next posting waits for company only that long.
        assert await asyncio.wait_for(post(ingest, "after"), 30) == 200

    asyncio.run(scenario())
    assert {"first", "after"} <= set(stored_numbers(services))


@pytest.mark.parametrize(
    ("token", "kept"),
    [
        (None, False),
        (till(1), False),
        ({"type": "EMAIL", "value": "maija@example.com"}, True),
    ],
    ids=["no token", "RECEIPT_ID", "EMAIL"],
)
def test_a_prepared_posting_keeps_its_request_only_without_rows(
    services: Services, token: dict[str, str] | None, kept: bool
) -> None:
    """The writer's queue holds rows, not parsed documents, for every posting plain inserts can
    store; one that ``create_receipt`` must store after all reads the same request again."""
    merchant = make_partner(services, namespaces=["kauppa"])
    doc = receipt_doc(receiptNumber="R-1")
    body = orjson.dumps(token_body(doc, token) if token else doc)
    holder = look_up_holder(services.db, key_digest(merchant.api_key))
    assert holder is not None
    request = check_body(body, holder)
    now = services.clock.now()
    key = Signer(services.db, services.settings).load(now)
    prepared = prepare_posting(services.settings, Posting(holder, request, now), body, key)
    assert (prepared.rows is None) is kept
    assert (prepared.validated is request) is kept
    again = prepared.request()
    assert again.document == request.document
    assert again.tokens == request.tokens
    assert again.receipt == request.receipt
