"""The receipt log (docs/signing.md, "The receipt log"): every stored receipt is a leaf of its
transaction's batch, the signed tree heads take every batch once, and a saved receipt's proof
leads from its signature to a head signed by a published key; a changed document, proof or head
is refused, before and after a key rotation."""

from __future__ import annotations

import asyncio
import base64
import threading
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select, update

from kuitti import receipt_log, signatures
from kuitti.clock import FrozenClock
from kuitti.db import Database
from kuitti.models import Receipt, ReceiptLogBatch, ReceiptLogHead
from kuitti.partners.keys import key_digest, look_up_holder
from kuitti.posting.checks import check_body
from kuitti.posting.ingest import write_batch
from kuitti.posting.service import Posting, create_receipts, prepare_posting
from kuitti.receipts import log
from kuitti.retention import delete_receipts
from kuitti.services import Services
from kuitti.signatures import Signer
from kuitti.worker import run_log_sealer
from tests.conftest import LiveServer
from tests.factories import auth, make_partner, receipt_doc
from tests.receipts.test_signing import (
    pdf_attachments,
    post,
    published,
    read,
    saved_receipt,
)
from tests.test_cli import run, run_json

THREADS = 4
POSTS = 6


def write_together(
    services: Services, api_key: str, count: int, db: Database | None = None
) -> list[str]:
    """``count`` receipts written by the writer in one transaction (one batch of the log)."""
    db = db or services.db
    holder = look_up_holder(db, key_digest(api_key))
    assert holder is not None
    key = Signer(db, services.settings).load(services.clock.now())
    prepared = []
    for n in range(count):
        body = orjson.dumps(receipt_doc(receiptNumber=f"B-{n}"))
        posting = Posting(holder, check_body(body, holder), services.clock.now())
        prepared.append(prepare_posting(services.settings, posting, body, key))
    ids = []
    for outcome in write_batch(db, services.settings, prepared):
        assert outcome.answer is not None, outcome
        ids.append(outcome.answer[1]["receipt_id"])
    return ids


def seal(services: Services) -> dict[str, Any] | None:
    return log.seal_now(services.db, services.settings, now=services.clock.now())


def heads(services: Services) -> list[ReceiptLogHead]:
    with services.db.session(write=False) as session:
        return list(session.scalars(select(ReceiptLogHead).order_by(ReceiptLogHead.seq)))


def check(saved: bytes, keys: dict[str, Any]) -> dict[str, Any]:
    return log.check_saved(saved, keys)


def changed(data: dict[str, Any], **log_members: Any) -> bytes:
    """A saved receipt with members of its proof replaced."""
    return orjson.dumps({**data, "log": {**data["log"], **log_members}})


def flipped(text: str) -> str:
    """One bit of a Base64url hash changed."""
    raw = bytearray(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4)))
    raw[0] ^= 1
    return base64.urlsafe_b64encode(bytes(raw)).rstrip(b"=").decode()


def assert_the_chain_holds(services: Services) -> None:
    """Heads numbered from 1 without a gap, each naming the hash of the one before it; every
    batch in exactly one head, each head counting its batches and their receipts."""
    found = heads(services)
    assert [head.seq for head in found] == list(range(1, len(found) + 1))
    for before, head in zip([None, *found], found, strict=False):
        assert head.previous == (None if before is None else log.head_hash(before.jws))
    with services.db.session(write=False) as session:
        unsealed = session.scalar(select(func.count()).where(ReceiptLogBatch.head_seq.is_(None)))
        assert unsealed == 0
        for head in found:
            batches = session.execute(
                select(ReceiptLogBatch.size, ReceiptLogBatch.head_index)
                .where(ReceiptLogBatch.head_seq == head.seq)
                .order_by(ReceiptLogBatch.head_index)
            ).all()
            assert [b.head_index for b in batches] == list(range(head.tree_size))
            assert sum(b.size for b in batches) == head.receipts
        receipts = session.scalar(select(func.count()).select_from(Receipt))
    assert sum(head.receipts for head in found) == receipts


def test_concurrent_posts_and_seals_log_every_receipt_once_with_a_proof_that_verifies(
    live_server: LiveServer, client: httpx.Client, services: Services
) -> None:
    """Posts from threads through the server's writer, and from a second writer with an
    engine of its own (as another process has), while heads are sealed over and over: every
    receipt ends in one batch of one head, and its saved copy proves it."""
    merchants = [make_partner(services, name=f"Kauppa {n}") for n in range(2)]
    other = Database(services.db.url, pool_size=2)
    sealed: list[dict[str, Any]] = []

    def post_many(thread: int) -> list[str]:
        with httpx.Client(base_url=live_server.url, timeout=30) as http:
            return [post(http, merchants[0].api_key, f"T{thread}-{n}") for n in range(POSTS)]

    def write_and_seal_elsewhere() -> list[str]:
        """Batches of three, each followed by a seal, while the server's writer writes."""
        ids = []
        for _ in range(POSTS):
            ids += write_together(services, merchants[1].api_key, 3, other)
            head = log.seal_now(other, services.settings, now=services.clock.now())
            if head is not None:
                sealed.append(head)
        return ids

    try:
        with ThreadPoolExecutor(THREADS + 1) as pool:
            elsewhere = pool.submit(write_and_seal_elsewhere)
            threads = [pool.submit(post_many, t) for t in range(THREADS)]
            posted = [i for t in threads for i in t.result()]
            written = elsewhere.result()
    finally:
        other.dispose()
    seal(services)
    assert len(set(posted + written)) == THREADS * POSTS + 3 * POSTS
    assert_the_chain_holds(services)
    assert len(sealed) == POSTS  # each seal had at least its own writer's batch

    keys = published(client)
    for api_key, ids in ((merchants[0].api_key, posted), (merchants[1].api_key, written)):
        for receipt_id in ids:
            result = check(saved_receipt(client, api_key, receipt_id), keys)
            assert result["valid"], result
            assert result["log"]["status"] == log.IN_LOG, result


def test_a_receipt_stored_after_a_seal_goes_into_the_next_head(
    client: httpx.Client, services: Services, clock: FrozenClock
) -> None:
    merchant = make_partner(services)
    first = post(client, merchant.api_key, "R-1")
    assert seal(services) is not None
    assert seal(services) is None  # nothing new: no empty head
    second = post(client, merchant.api_key, "R-2")
    pending = read(client, merchant.api_key, second, "signed_json")
    assert orjson.loads(pending.content)["log"]["pending"] is True
    keys = published(client)
    assert check(pending.content, keys)["log"]["status"] == log.PENDING
    assert check(pending.content, keys)["valid"]

    clock.advance(60)
    head = seal(services)
    assert head is not None
    assert (head["seq"], head["tree_size"], head["receipts"]) == (2, 1, 1)
    # The saved receipt changed with the seal: its ETag too, so no 304 keeps the pending one.
    again = client.get(
        f"/api/v1/receipts/{second}/signed_json/",
        headers={**auth(merchant.api_key), "If-None-Match": pending.headers["etag"]},
    )
    assert again.status_code == 200
    assert again.headers["etag"] != pending.headers["etag"]
    results = [check(saved_receipt(client, merchant.api_key, r), keys) for r in (first, second)]
    assert [r["log"]["head"] for r in results] == [1, 2]
    assert results[1]["log"]["since"] == head["time"]
    assert_the_chain_holds(services)


def test_a_receipt_pdf_carries_the_proof_it_has_and_changes_when_sealed(
    client: httpx.Client, services: Services, clock: FrozenClock
) -> None:
    """The ``service_pdf``'s attached saved receipt is its ``signed_json``, proof included: the
    API's PDF and the link page's alike, and a PDF fetched before the seal is not served (nor
    its ETag matched) after it."""
    merchant = make_partner(services)
    answer = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    receipt_id, page = answer.json()["receipt_id"], answer.json()["receipt_web_url"]
    before = read(client, merchant.api_key, receipt_id, "service_pdf")
    attached = orjson.loads(pdf_attachments(before)[signatures.SIGNED_FILE])
    assert attached["log"]["pending"] is True

    clock.advance(60)
    assert seal(services) is not None
    again = client.get(
        f"/api/v1/receipts/{receipt_id}/service_pdf/",
        headers={**auth(merchant.api_key), "If-None-Match": before.headers["etag"]},
    )
    assert again.status_code == 200  # not 304: the attachment holds the proof now
    keys = published(client)
    link_pdf = client.get(f"{page}/pdf")
    assert link_pdf.status_code == 200
    for pdf in (again, link_pdf):
        saved = pdf_attachments(pdf)[signatures.SIGNED_FILE]
        assert saved == saved_receipt(client, merchant.api_key, receipt_id)
        result = check(saved, keys)
        assert result["valid"], result
        assert result["log"]["head"] == 1, result


@pytest.mark.postgres_only
def test_a_batch_committed_during_a_seal_goes_into_the_next_head(
    client: httpx.Client, services: Services
) -> None:
    """The writer takes no lock of the sealer's: a batch that is not committed when a seal
    reads the batches is left to the next head, whole."""
    merchant = make_partner(services)
    post(client, merchant.api_key, "R-1")
    holder = look_up_holder(services.db, key_digest(merchant.api_key))
    assert holder is not None
    body = orjson.dumps(receipt_doc(receiptNumber="R-2"))
    key = Signer(services.db, services.settings).load(services.clock.now())
    prepared = prepare_posting(
        services.settings,
        Posting(holder, check_body(body, holder), services.clock.now()),
        body,
        key,
    )
    assert prepared.rows is not None
    from_writer = threading.Event()
    sealed_meanwhile = threading.Event()

    def write() -> None:
        with services.db.session() as session:
            create_receipts(session, services.settings, [prepared])
            from_writer.set()
            assert sealed_meanwhile.wait(30)

    with ThreadPoolExecutor(1) as pool:
        writing = pool.submit(write)
        assert from_writer.wait(30)
        head = seal(services)
        sealed_meanwhile.set()
        writing.result()
    assert head is not None
    assert head["receipts"] == 1  # R-1 only: R-2's batch was not committed
    later = seal(services)
    assert later is not None
    assert later["receipts"] == 1
    assert_the_chain_holds(services)


def test_a_changed_document_proof_or_head_is_refused(
    client: httpx.Client, services: Services, tmp_path: Path
) -> None:
    merchant = make_partner(services)
    ids = [post(client, merchant.api_key, "R-1"), *write_together(services, merchant.api_key, 3)]
    seal(services)
    keys = published(client)
    saved = saved_receipt(client, merchant.api_key, ids[2])
    assert check(saved, keys)["log"]["status"] == log.IN_LOG
    data = orjson.loads(saved)
    member = data["log"]
    other = orjson.loads(saved_receipt(client, merchant.api_key, ids[0]))["log"]
    claims, token = member["tree_head"].split(".")[1], member["tree_head"]
    cheaper = orjson.loads(base64.urlsafe_b64decode(claims + "=" * (-len(claims) % 4)))
    cheaper["root"] = flipped(cheaper["root"])
    forged_claims = base64.urlsafe_b64encode(orjson.dumps(cheaper)).rstrip(b"=").decode()
    forged = ".".join([token.split(".")[0], forged_claims, token.split(".")[2]])
    tampered = {
        "document": orjson.dumps({**data, "payload": data["payload"].replace("B-1", "B-9")}),
        "batch path": changed(
            data, batch_path=[flipped(member["batch_path"][0]), *member["batch_path"][1:]]
        ),
        "batch index": changed(data, batch_index=member["batch_index"] ^ 1),
        "head": changed(data, tree_head=forged),
        "another receipt's proof": changed(data, **other),
        "a head of another log": changed(data, tree_head=token.replace(".", "x.", 1)),
        "not a proof": changed(data, batch_path="nothing"),
    }
    assert member["batch_path"]
    assert member["head_path"]
    tampered["head path"] = changed(
        data, head_path=[flipped(member["head_path"][0]), *member["head_path"][1:]]
    )
    tampered["head size"] = changed(data, head_size=member["head_size"] + 1)
    for name, saved_changed in tampered.items():
        result = check(saved_changed, keys)
        assert result["status"] == signatures.TAMPERED, name
        assert not result["valid"], name

    good, bad = tmp_path / "good.json", tmp_path / "bad.json"
    good.write_bytes(saved)
    bad.write_bytes(tampered["batch path"])
    keys_file = tmp_path / "keys.json"
    keys_file.write_bytes(orjson.dumps(keys))
    checked = run(services, "receipts", "verify", str(good), "--keys", str(keys_file))
    assert checked.exit_code == 0, checked.output
    assert "in the log since" in checked.output
    refused = run(services, "receipts", "verify", str(bad), "--keys", str(keys_file), "--json")
    assert refused.exit_code == 1
    assert orjson.loads(refused.stdout)["files"][0]["log"]["status"] == log.TAMPERED


def test_a_head_signed_by_a_retired_key_still_proves_its_receipts(
    client: httpx.Client, services: Services, clock: FrozenClock
) -> None:
    merchant = make_partner(services)
    before = post(client, merchant.api_key, "R-1")
    first = seal(services)
    for _ in range(2):
        run_json(services, "receipts", "keys", "rotate")
        clock.advance(120)
    after = post(client, merchant.api_key, "R-2")
    second = run_json(services, "receipts", "log", "seal")["head"]
    assert first is not None
    assert second is not None
    assert first["kid"] != second["kid"]
    keys = published(client)
    status = {key["kid"]: key["status"] for key in keys["keys"]}
    assert (status[first["kid"]], status[second["kid"]]) == ("retired", "signing")
    for receipt_id, head in ((before, first), (after, second)):
        result = check(saved_receipt(client, merchant.api_key, receipt_id), keys)
        assert result["valid"], result
        assert (result["log"]["status"], result["log"]["head"]) == (log.IN_LOG, head["seq"])
    unpublished = {"keys": [k for k in keys["keys"] if k["kid"] != first["kid"]]}
    result = check(saved_receipt(client, merchant.api_key, before), unpublished)
    assert result["status"] == signatures.UNKNOWN_KEY


def test_heads_are_published_for_anyone_to_keep(client: httpx.Client, services: Services) -> None:
    assert client.get(f"{log.HEADS_PATH}/latest").status_code == 404
    merchant = make_partner(services)
    post(client, merchant.api_key)
    first = seal(services)
    post(client, merchant.api_key, "R-2")
    second = seal(services)
    assert first is not None
    assert second is not None
    latest = client.get(f"{log.HEADS_PATH}/latest")
    assert latest.status_code == 200
    assert latest.json() == second
    assert "max-age=60" in latest.headers["cache-control"]
    one = client.get(f"{log.HEADS_PATH}/1")
    assert one.json() == first
    assert "immutable" in one.headers["cache-control"]
    assert (
        second["previous"]
        == base64.urlsafe_b64encode(log.head_hash(one.json()["jws"])).rstrip(b"=").decode()
    )
    keys = published(client)
    assert log.verify_head(second["jws"], keys).head == {
        k: second[k] for k in ("seq", "time", "tree_size", "receipts", "root", "previous")
    }
    for missing in ("3", "0", "x", "9" * 20):
        answer = client.get(f"{log.HEADS_PATH}/{missing}")
        assert answer.status_code == 404
        assert set(answer.json()) == {"error", "decription"}


def test_the_verify_page_says_since_when_a_receipt_is_in_the_log(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    receipt_id = post(client, merchant.api_key)
    head = seal(services)
    assert head is not None
    document = read(client, merchant.api_key, receipt_id, "service_json").content
    page = client.get(f"/verify?r={receipt_id}&h={signatures.fingerprint(document)}&lang=en").text
    assert f"In the receipt log since {head['time']} (tree head 1)." in page


def test_the_backfill_logs_receipts_signed_before_the_log_began(
    client: httpx.Client, services: Services
) -> None:
    merchant = make_partner(services)
    ids = [post(client, merchant.api_key, f"R-{n}") for n in range(3)]
    with services.db.session() as session:
        session.execute(update(Receipt).values(log_batch_id=None))
        session.execute(update(ReceiptLogBatch).values(size=0))  # forgotten, as before 0011
    missing = saved_receipt(client, merchant.api_key, ids[0])
    assert "log" not in orjson.loads(missing)
    assert check(missing, published(client))["log"]["status"] == log.NOT_LOGGED
    assert run_json(services, "receipts", "sign-existing", "--batch", "2")["signed"] == 3
    seal(services)
    with services.db.session(write=False) as session:
        batches = session.scalars(
            select(ReceiptLogBatch).where(ReceiptLogBatch.size > 0).order_by(ReceiptLogBatch.id)
        ).all()
        assert [batch.size for batch in batches] == [2, 1]
        for receipt_id in ids:
            receipt = session.get(Receipt, uuid.UUID(receipt_id))
            assert receipt is not None
            assert receipt.signature is not None
            assert receipt.log_batch_id in {batch.id for batch in batches}
            batch = session.get(ReceiptLogBatch, receipt.log_batch_id)
            assert batch is not None
            assert receipt_log.position(batch.leaves, receipt.signature) is not None
    keys = published(client)
    for receipt_id in ids:
        assert check(saved_receipt(client, merchant.api_key, receipt_id), keys)["valid"]


def test_a_deleted_receipt_leaves_the_log_and_a_restored_one_its_proof(
    client: httpx.Client, services: Services, tmp_path: Path
) -> None:
    """Retention deletes receipts, never the log: the other receipts of a batch keep their
    proofs, and a receipt restored from its month's archive has its proof again."""
    merchant = make_partner(services)
    ids = write_together(services, merchant.api_key, 3)
    seal(services)
    keys = published(client)
    saved = {receipt_id: saved_receipt(client, merchant.api_key, receipt_id) for receipt_id in ids}
    archive = tmp_path / "january.tar"
    run_json(services, "archive", "export", "--month", "2026-01", "--output", str(archive))

    def log_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
        with services.db.session(write=False) as session:
            batches = session.execute(select(ReceiptLogBatch.id, ReceiptLogBatch.leaves)).all()
            tree_heads = session.execute(select(ReceiptLogHead.seq, ReceiptLogHead.jws)).all()
        return [tuple(row) for row in batches], [tuple(row) for row in tree_heads]

    before = log_rows()
    with services.db.session() as session:
        delete_receipts(session, [uuid.UUID(ids[0])])
    assert log_rows() == before
    for receipt_id in ids[1:]:
        assert saved_receipt(client, merchant.api_key, receipt_id) == saved[receipt_id]
        assert check(saved[receipt_id], keys)["log"]["status"] == log.IN_LOG

    assert run_json(services, "archive", "restore", str(archive))["restored"] == 1
    assert saved_receipt(client, merchant.api_key, ids[0]) == saved[ids[0]]
    assert check(saved[ids[0]], keys)["log"]["status"] == log.IN_LOG


def test_the_worker_seals_every_few_seconds(client: httpx.Client, services: Services) -> None:
    """The worker's step seals what was stored (``KUITTI_RECEIPT_LOG_SEAL_SECONDS``, here a
    twentieth of a second), and once more as it stops."""
    quick = services.settings.model_copy(update={"receipt_log_seal_seconds": 0.05})
    worker_services = Services(settings=quick, db=services.db, clock=services.clock)
    merchant = make_partner(services)

    async def scenario() -> list[int]:
        stop = asyncio.Event()
        sealer = asyncio.create_task(run_log_sealer(worker_services, stop))
        sealed: list[int] = []
        for number in ("R-1", "R-2"):
            await asyncio.to_thread(post, client, merchant.api_key, number)
            async with asyncio.timeout(30):
                while len(heads(services)) == len(sealed):
                    await asyncio.sleep(0.01)  # the worker's next round: a condition, polled
            sealed = [head.receipts for head in heads(services)]
        stop.set()
        await sealer
        return sealed

    assert asyncio.run(scenario()) == [1, 1]
    assert_the_chain_holds(services)
