"""Every moment a caller sends is read by one rule (``kuitti.inputs.parse_moment``): an ISO 8601
date-time with an offset that converts to UTC within years 1–9999. A moment outside is 400
``invalid_value`` naming the field, the dry run answers as the post does, and nothing is stored;
the last moments inside are served like any other. The service keeps a month clear of either end
of the calendar, for the windows it computes around a moment."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from kuitti.clock import FrozenClock
from kuitti.services import Services
from tests.cards.support import World, make_world
from tests.factories import auth, product_row, receipt_doc
from tests.receipts.test_dry_run import row_counts

OUT_OF_RANGE = [
    "0001-01-01T00:00:00+14:00",
    "9999-12-31T23:59:59-14:00",
    "0001-01-01T00:00:00+01:00",
    "0001-01-31T23:59:59.999999Z",
    "9999-12-01T00:00:00Z",
    "9999-11-30T23:59:59-00:01",
]
AT_THE_ENDS = ["0001-02-01T00:00:00Z", "9999-11-30T23:59:59.999999Z", "0001-02-01T14:00:00+14:00"]
BEYOND = "must lie from 0001-02-01 up to 9999-12-01 in UTC."


@pytest.fixture
def world(services: Services, client: httpx.Client, clock: FrozenClock) -> World:
    return make_world(services, client, clock)


def errors(answer: httpx.Response) -> list[tuple[str, str]]:
    body = answer.json()
    items = body if isinstance(body, list) else [body]
    return [(e["error"], e["decription"]) for e in items]


def receipt_at(field: str, moment: str) -> dict[str, Any]:
    if field == "receiptTimeStamp":
        return receipt_doc(receiptTimeStamp=moment)
    if field == "payments[0].attributes.timeStamp":
        doc = receipt_doc()
        doc["payments"][0]["attributes"]["timeStamp"] = moment
        return doc
    doc = receipt_doc([product_row(quantity=-1)], payments=None, type="RETURN")
    doc["originalReceipt"] = {"receiptNumber": "R-2026-0001", "receiptTimeStamp": moment}
    return doc


RECEIPT_FIELDS = [
    "receiptTimeStamp",
    "payments[0].attributes.timeStamp",
    "originalReceipt.receiptTimeStamp",
]


@pytest.mark.parametrize("moment", OUT_OF_RANGE)
@pytest.mark.parametrize("field", RECEIPT_FIELDS)
def test_a_receipt_moment_beyond_the_calendar_is_refused_by_post_and_dry_run(
    world: World, field: str, moment: str
) -> None:
    before = row_counts(world.services)
    headers = auth(world.merchant.api_key)
    body = receipt_at(field, moment)
    dry = world.client.post("/api/v1/receipts/validate", json=body, headers=headers)
    real = world.client.post("/api/v1/receipts/", json=body, headers=headers)
    expected = [("invalid_value", f"{field}: {BEYOND}")]
    assert (real.status_code, errors(real)) == (400, expected)
    assert (dry.status_code, errors(dry)) == (400, expected)
    assert row_counts(world.services) == before


@pytest.mark.parametrize("moment", AT_THE_ENDS)
@pytest.mark.parametrize("field", RECEIPT_FIELDS[:2])
def test_a_receipt_at_the_ends_of_the_calendar_is_stored_and_read(
    world: World, field: str, moment: str
) -> None:
    receipt_id = world.receipt(receipt_at(field, moment))
    for data_format in ("service_json", "service_pdf", "finvoice_xml", "finvoice_pdf"):
        answer = world.client.get(
            f"/api/v1/receipts/{receipt_id}/{data_format}/",
            headers=auth(world.merchant.api_key),
        )
        assert answer.status_code in (200, 409), (data_format, answer.text)
    listed = world.client.get("/api/v1/receipts/", headers=auth(world.merchant.api_key))
    assert listed.status_code == 200
    assert [r["receipt_id"] for r in listed.json()["receipts"]] == [receipt_id]


@pytest.mark.parametrize("moment", [*OUT_OF_RANGE, "9999-12"])
def test_exp_date_beyond_the_calendar_is_refused(world: World, moment: str) -> None:
    before = row_counts(world.services)
    answer = world.client.post(
        "/api/v1/cards/",
        json={"partner_card_id": "c-1", "masked_pan": "415301******1234", "exp_date": moment},
        headers=auth(world.issuer.api_key),
    )
    expected = [("invalid_value", f"exp_date: {BEYOND}")]
    assert (answer.status_code, errors(answer)) == (400, expected)
    assert row_counts(world.services) == before


@pytest.mark.parametrize("moment", OUT_OF_RANGE)
def test_a_transaction_timestamp_beyond_the_calendar_is_refused(world: World, moment: str) -> None:
    world.enroll()
    before = row_counts(world.services)
    answer = world.transaction(expect=400, timestamp=moment)
    assert errors_of(answer) == [("invalid_value", f"timestamp: {BEYOND}")]
    assert row_counts(world.services) == before


def errors_of(data: Any) -> list[tuple[str, str]]:
    items = data if isinstance(data, list) else [data]
    return [(e["error"], e["decription"]) for e in items]


@pytest.mark.parametrize("moment", AT_THE_ENDS)
def test_cards_and_transactions_at_the_ends_of_the_calendar_are_taken(
    world: World, moment: str
) -> None:
    world.enroll("c-end", exp_date=moment)
    world.enroll()
    world.transaction(timestamp=moment)
    world.receipt(match=True, timeStamp=moment)


@pytest.mark.parametrize(
    ("since", "reason"),
    [
        *((moment, BEYOND) for moment in OUT_OF_RANGE),
        ("0.5", "must be an ISO 8601 date-time, e.g. 2026-05-04T12:30:00+03:00."),
        ("1767225600", "must be an ISO 8601 date-time, e.g. 2026-05-04T12:30:00+03:00."),
        ("2026-01-01", "must be an ISO 8601 date-time (a date alone is not enough)."),
    ],
)
def test_the_lists_since_takes_only_a_date_time_with_an_offset(
    world: World, since: str, reason: str
) -> None:
    answer = world.client.get(
        "/api/v1/receipts/", params={"since": since}, headers=auth(world.merchant.api_key)
    )
    assert (answer.status_code, errors(answer)) == (400, [("invalid_value", f"since: {reason}")])


@pytest.mark.parametrize("since", AT_THE_ENDS)
def test_the_lists_since_at_the_ends_of_the_calendar(world: World, since: str) -> None:
    receipt_id = world.receipt()
    answer = world.client.get(
        "/api/v1/receipts/", params={"since": since}, headers=auth(world.merchant.api_key)
    )
    assert answer.status_code == 200
    listed = [r["receipt_id"] for r in answer.json()["receipts"]]
    assert listed == ([receipt_id] if since.startswith("0001") else [])
