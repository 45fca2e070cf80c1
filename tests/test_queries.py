"""N+1 guards: the statements a request sends do not grow with the rows or receipts it handles.

Counted on the live server's engine (``sql`` in ``tests/conftest.py``). Each comparison warms up
first, so one-off work (the partner-key cache) does not blur the count.
"""

from __future__ import annotations

from typing import Any

import httpx

from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.conftest import StatementCounter
from tests.factories import auth, make_partner, many_rows, receipt_doc

LIST = "/api/v1/receipts/"


def post(client: httpx.Client, merchant: NewPartner, doc: dict[str, Any]) -> list[str]:
    answer = client.post(LIST, json=doc, headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    return [answer.json()["receipt_id"]]


def get(client: httpx.Client, merchant: NewPartner, path: str) -> httpx.Response:
    answer = client.get(path, headers=auth(merchant.api_key))
    assert answer.status_code == 200, answer.text
    return answer


def test_ingest_costs_the_same_for_one_row_and_sixty(
    client: httpx.Client, services: Services, sql: StatementCounter
) -> None:
    merchant = make_partner(services)
    post(client, merchant, receipt_doc(receiptNumber="WARM-UP"))
    with sql.counting() as one_row:
        post(client, merchant, receipt_doc(many_rows(1), receiptNumber="R-1"))
    with sql.counting() as sixty_rows:
        post(client, merchant, receipt_doc(many_rows(60), receiptNumber="R-60"))
    assert one_row
    assert len(sixty_rows) == len(one_row), sixty_rows


def test_reading_costs_the_same_for_one_row_and_sixty(
    client: httpx.Client, services: Services, sql: StatementCounter
) -> None:
    merchant = make_partner(services)
    [short] = post(client, merchant, receipt_doc(many_rows(1), receiptNumber="SHORT"))
    [long] = post(client, merchant, receipt_doc(many_rows(60), receiptNumber="LONG"))
    with sql.counting() as first_read:
        get(client, merchant, f"{LIST}{short}/service_json/")
    get(client, merchant, f"{LIST}{long}/service_json/")
    with sql.counting() as one_row:
        get(client, merchant, f"{LIST}{short}/service_json/")
    with sql.counting() as sixty_rows:
        get(client, merchant, f"{LIST}{long}/service_json/")
    assert one_row
    assert len(sixty_rows) == len(one_row), sixty_rows
    # Rendered once, a receipt is read again in one statement: the key, the right and the ETag.
    assert len(one_row) == 1, one_row
    assert len(first_read) > 1, first_read


def test_listing_costs_the_same_for_one_receipt_and_twelve(
    client: httpx.Client, services: Services, sql: StatementCounter
) -> None:
    lonely, busy = make_partner(services, name="Yksi Oy"), make_partner(services, name="Monta Oy")
    post(client, lonely, receipt_doc(receiptNumber="ONLY"))
    for number in range(12):
        post(client, busy, receipt_doc(many_rows(3), receiptNumber=f"B-{number}"))
    get(client, lonely, LIST)
    get(client, busy, LIST)
    with sql.counting() as one_receipt:
        get(client, lonely, LIST)
    with sql.counting() as twelve_receipts:
        listed = get(client, busy, LIST).json()
    assert len(listed["receipts"]) == 12
    assert one_receipt
    assert len(twelve_receipts) == len(one_receipt), twelve_receipts
