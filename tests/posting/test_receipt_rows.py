"""The two ways a receipt is stored write the same rows.

The writer's batch inserts a plain posting's rows as they are; ``create_receipt`` stores one as
models, then adds what only some receipts need. Both build the rows with ``receipt_rows``; this
holds them to it: the same document posted both ways leaves the same rows in every table a new
receipt writes, column by column, but for the ids of the new rows.
"""

from __future__ import annotations

import uuid
from typing import Any

import orjson
from sqlalchemy import Table, select

from kuitti import receipt_log
from kuitti.db import Base
from kuitti.models import Partner, Receipt, ReceiptLogBatch
from kuitti.partners.keys import key_digest, look_up_holder
from kuitti.posting.checks import check_body
from kuitti.posting.ingest import write_batch
from kuitti.posting.service import Posting, create_receipt, prepare_posting
from kuitti.services import Services
from kuitti.signatures import Signer, jwks, verify
from tests.factories import make_partner, receipt_doc, token_body

# Each table a new receipt writes, and how its rows name the receipt.
TABLES = {
    "receipts": "id",
    "receipt_grants": "receipt_id",
    "receipt_links": "receipt_id",
    "card_payments": "receipt_id",
}
# A signature names its receipt and ES256 signs with a random nonce: it differs by nature
# (both are checked to verify), and so does the receipt log's batch that holds its hash (both
# are checked to hold it).
NEW_IDS = {"id", "receipt_id", "identifier", "payment_id", "signature", "log_batch_id"}


def stored_rows(services: Services, receipt_id: uuid.UUID) -> dict[str, list[dict[str, Any]]]:
    """The rows of ``receipt_id`` in each table, without the ids that differ by nature (and
    the link's identifier, which differs by design), plus the matching queue entries of its
    payments."""
    tables: dict[str, Table] = {name: Base.metadata.tables[name] for name in TABLES}
    queue = Base.metadata.tables["card_matching_queue"]
    found: dict[str, list[dict[str, Any]]] = {}
    with services.db.session(write=False) as session:
        for name, column in TABLES.items():
            table = tables[name]
            rows = session.execute(select(table).where(table.c[column] == receipt_id)).mappings()
            found[name] = [{k: v for k, v in row.items() if k not in NEW_IDS} for row in rows]
        payments = tables["card_payments"]
        entries = session.execute(
            select(queue)
            .join(payments, payments.c.id == queue.c.payment_id)
            .where(payments.c.receipt_id == receipt_id)
        ).mappings()
        found["card_matching_queue"] = [
            {k: v for k, v in row.items() if k not in NEW_IDS} for row in entries
        ]
    return found


def test_the_batch_and_create_receipt_store_the_same_rows(services: Services) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    holder = look_up_holder(services.db, key_digest(merchant.api_key))
    assert holder is not None
    doc = receipt_doc(receiptNumber="R-1")
    now = services.clock.now()

    def body(identifier: str) -> bytes:
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": identifier}
        return orjson.dumps(token_body(doc, token))

    plain = body("till-1-0001")
    key = Signer(services.db, services.settings).load(now)
    prepared = prepare_posting(
        services.settings, Posting(holder, check_body(plain, holder), now), plain, key
    )
    assert prepared.rows is not None  # stored by the batch's plain inserts
    [outcome] = write_batch(services.db, services.settings, [prepared])
    assert outcome.answer is not None
    by_batch = uuid.UUID(outcome.answer[1]["receipt_id"])

    with services.db.session() as session:
        partner = session.get(Partner, holder.id)
        assert partner is not None
        request = check_body(body("till-1-0002"), holder)
        _, answer = create_receipt(session, services.settings, partner, request, now=now)
    by_model = uuid.UUID(answer["receipt_id"])

    batch_rows, model_rows = stored_rows(services, by_batch), stored_rows(services, by_model)
    assert all(batch_rows[name] for name in batch_rows), batch_rows  # every table has a row
    assert batch_rows == model_rows
    with services.db.session(write=False) as session:
        keys = jwks(session, now=now)
        for receipt_id in (by_batch, by_model):
            receipt = session.get(Receipt, receipt_id)
            assert receipt is not None
            assert receipt.signature is not None
            assert verify(receipt.document.encode(), receipt.signature, keys).valid
            batch = session.get(ReceiptLogBatch, receipt.log_batch_id)
            assert batch is not None
            assert receipt_log.position(batch.leaves, receipt.signature) is not None
