"""The writer's duplicate checks search the primary keys they ask, at any size.

A receipt is posted with a RECEIPT_ID and an Idempotency-Key over tables already holding many
links and idempotency records; each statement the post sent to ``receipt_links`` and
``idempotency_records`` is explained with its own parameters. On PostgreSQL the plan must be a
search of the primary key with both of its columns as the index condition (a sequential scan, or
a scan of the whole index filtered by the second column, fails); on SQLite ``EXPLAIN QUERY PLAN``
must show a SEARCH of the key on both columns.
"""

from __future__ import annotations

import contextlib
import re
import uuid
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
from sqlalchemy import event, text

from kuitti.models import IdempotencyRecord, ReceiptLink
from kuitti.partners.keys import key_digest, look_up_holder
from kuitti.posting.checks import check_body
from kuitti.posting.ingest import write_batch
from kuitti.posting.service import IdempotencyKey, Posting, prepare_posting
from kuitti.services import Services
from kuitti.signatures import Signer
from tests.factories import auth, make_partner, receipt_doc, token_body

NAMESPACES = 20
LINKS_PER_NAMESPACE = 1000
PARTNERS = 4
RECORDS_PER_PARTNER = 5000

CHECKED = {
    "receipt_links": ("namespace", "identifier"),
    "idempotency_records": ("partner_id", "key"),
}


@contextlib.contextmanager
def statements_sent(services: Services) -> Iterator[list[tuple[str, Any]]]:
    sent: list[tuple[str, Any]] = []

    def record(_conn: object, _cursor: object, statement: str, parameters: Any, *_: object) -> None:
        sent.append((statement, parameters))

    event.listen(services.db.engine, "before_cursor_execute", record)
    try:
        yield sent
    finally:
        event.remove(services.db.engine, "before_cursor_execute", record)


def fill(
    services: Services, merchant: uuid.UUID, receipt: uuid.UUID, namespaces: list[str]
) -> None:
    """Many links in each of ``namespaces``, many idempotency records of ``merchant`` and of
    other partners."""
    others = [make_partner(services, name=f"Muu {i} Oy").partner.id for i in range(PARTNERS - 1)]
    with services.db.session() as session:
        services.db.insert_rows(
            session,
            {
                ReceiptLink: [
                    {"namespace": ns, "identifier": f"till-{n:06}", "receipt_id": receipt}
                    for ns in namespaces
                    for n in range(LINKS_PER_NAMESPACE)
                ],
                IdempotencyRecord: [
                    {
                        "partner_id": partner,
                        "key": f"pos-{n:06}",
                        "request_hash": "0" * 64,
                        "status_code": 200,
                        "response_body": "{}",
                        "created_at": services.clock.now(),
                    }
                    for partner in [merchant, *others]
                    for n in range(RECORDS_PER_PARTNER)
                ],
            },
        )
    with services.db.engine.begin() as connection:
        connection.execute(text("ANALYZE"))


def plan(services: Services, statement: str, parameters: Any) -> list[tuple[str, str, str]]:
    """How the database runs ``statement``: each scan as (kind, table or index, condition).
    PostgreSQL: the plan's scan nodes (their index condition, if any); SQLite: the details of
    ``EXPLAIN QUERY PLAN`` (SCAN or SEARCH, then the rest)."""
    with services.db.engine.connect() as connection:
        if services.db.dialect == "sqlite":
            rows = connection.exec_driver_sql(f"EXPLAIN QUERY PLAN {statement}", parameters)
            details = [str(row[3]).partition(" ") for row in rows]
            return [(kind, "", rest) for kind, _, rest in details]
        explained = connection.exec_driver_sql(f"EXPLAIN (FORMAT JSON) {statement}", parameters)
        found = explained.scalar_one()
    nodes: list[tuple[str, str, str]] = []

    def walk(node: dict[str, Any]) -> None:
        if "Relation Name" in node or "Index Name" in node:
            name = node.get("Index Name", node.get("Relation Name", ""))
            nodes.append((node["Node Type"], name, node.get("Index Cond", "")))
        for child in node.get("Plans", []):
            walk(child)

    walk((orjson.loads(found) if isinstance(found, str) else found)[0]["Plan"])
    return nodes


def searches_primary_key(dialect: str, table: str, scans: list[tuple[str, str, str]]) -> bool:
    """Every scan of ``scans`` searches ``table``'s primary key on both its columns."""
    first, second = CHECKED[table]
    if dialect == "sqlite":
        own = [(kind, rest) for kind, _, rest in scans if rest.startswith(f"{table} ")]
        return bool(own) and all(
            kind == "SEARCH" and f"({first}=? AND {second}=?)" in rest for kind, rest in own
        )
    searches = [scan for scan in scans if scan[0] != "Bitmap Heap Scan"]  # fed by an index scan
    return bool(searches) and all(
        kind in {"Index Scan", "Index Only Scan", "Bitmap Index Scan"}
        and name == f"pk_{table}"
        and re.search(rf"\b{first}\b", condition) is not None
        and re.search(rf"\b{second}\b", condition) is not None
        for kind, name, condition in searches
    )


def test_the_duplicate_checks_search_the_primary_keys(
    client: httpx.Client, services: Services
) -> None:
    namespaces = [f"kauppa-{i}" for i in range(NAMESPACES)]
    merchant = make_partner(services, namespaces=namespaces)
    first = client.post("/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key))
    assert first.status_code == 200, first.text
    fill(services, merchant.partner.id, uuid.UUID(first.json()["receipt_id"]), namespaces)
    token = {"type": "RECEIPT_ID", "namespace": namespaces[7], "value": "till-new-1"}
    headers = {**auth(merchant.api_key), "Idempotency-Key": "pos-new-1"}
    with statements_sent(services) as one_post:
        answer = client.post(
            "/api/v1/receipts/", json=token_body(receipt_doc(), token), headers=headers
        )
    assert answer.status_code == 200, answer.text
    holder = look_up_holder(services.db, key_digest(merchant.api_key))
    assert holder is not None
    batch = []
    signing_key = Signer(services.db, services.settings).load(services.clock.now())
    for n, namespace in enumerate(namespaces[:3]):
        token = {"type": "RECEIPT_ID", "namespace": namespace, "value": f"till-new-{n + 2}"}
        body = orjson.dumps(token_body(receipt_doc(receiptNumber=f"B-{n}"), token))
        key = IdempotencyKey(f"pos-new-{n + 2}", "0" * 64)
        posting = Posting(holder, check_body(body, holder), services.clock.now(), key)
        batch.append(prepare_posting(services.settings, posting, body, signing_key))
    with statements_sent(services) as one_batch:
        outcomes = write_batch(services.db, services.settings, batch)
    assert [outcome.answer is not None for outcome in outcomes] == [True] * len(batch)
    for sent in one_post, one_batch:
        for table in CHECKED:
            reads = [
                (statement, parameters)
                for statement, parameters in sent
                if statement.lstrip().startswith("SELECT") and f"FROM {table}" in statement
            ]
            assert reads, f"the writer sent no read of {table}"
            for statement, parameters in reads:
                scans = plan(services, statement, parameters)
                assert searches_primary_key(services.db.dialect, table, scans), (statement, scans)
