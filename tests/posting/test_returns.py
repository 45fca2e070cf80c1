"""Returns and refunds linked to their purchase: naming the original, linking it only within one
merchant, and the return following the purchase's delivery in either order of arrival."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from kuitti.clock import FrozenClock
from kuitti.models import PartnerRole, Receipt
from kuitti.services import Services
from tests.cards.support import AUTH_CODE, MID, PAID_AT, World, iso, make_world, race
from tests.factories import auth, card_payment, make_partner, product_row, receipt_doc, token_body
from tests.test_cli import run, run_json
from tests.webhooks.receivers import Received, Receiver
from tests.webhooks.support import add_connection, deliver, webhook_partner

URL = "/api/v1/receipts/"
RACE_ROUNDS = 12
RACE_ROUNDS = 12


@pytest.fixture
def world(services: Services, client: httpx.Client, clock: FrozenClock) -> World:
    return make_world(services, client, clock)


ORIGINAL_NUMBER = "R-2026-0001"  # receipt_doc()'s number and time
ORIGINAL_TIME = "2026-01-15T14:03:00+02:00"


def return_doc(*, payments: list[dict[str, Any]] | None = None, **original: Any) -> dict[str, Any]:
    """A return of one coffee, a day after the purchase, naming ``original`` (its keys are the
    document's: ``originalReceiptId=…`` or ``originalReceipt={…}``)."""
    doc = receipt_doc(
        [product_row(quantity=-1)],
        payments=payments,
        type="RETURN",
        receiptNumber="R-2026-0107",
        receiptTimeStamp="2026-01-16T10:00:00+02:00",
    )
    doc.update(original)
    return doc


def post(world: World, body: Any, *, key: str | None = None) -> httpx.Response:
    return world.client.post(URL, json=body, headers=auth(key or world.merchant.api_key))


def posted(world: World, body: Any, *, key: str | None = None) -> dict[str, Any]:
    answer = post(world, body, key=key)
    assert answer.status_code == 200, answer.text
    data: dict[str, Any] = answer.json()
    return data


def errors(answer: httpx.Response) -> list[tuple[str, str]]:
    body = answer.json()
    items = body if isinstance(body, list) else [body]
    return [(e["error"], e["decription"]) for e in items]


def receipt_count(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(Receipt)) or 0


def delivered_to_user(world: World) -> str:
    """A purchase that reaches the world's user at once (an EMAIL token to her address)."""
    body = token_body(receipt_doc(), {"type": "EMAIL", "value": world.user.email})
    data = posted(world, body)
    assert data["tokens"] == [{"type": "EMAIL", "status": "delivered"}]
    receipt_id: str = data["receipt_id"]
    return receipt_id


class TestNamingTheOriginal:
    @pytest.mark.parametrize(
        ("original", "expected"),
        [
            (
                {"originalReceiptId": "R-2026-0001"},
                "originalReceiptId: must be a receipt_id this service gave (a UUID).",
            ),
            ({"originalReceiptId": 12}, "originalReceiptId: input should be a valid string."),
            (
                {"originalReceipt": {"receiptTimeStamp": ORIGINAL_TIME}},
                "originalReceipt.receiptNumber: this field is required.",
            ),
            (
                {"originalReceipt": {"receiptNumber": "1", "receiptTimeStamp": "2026-01-15"}},
                "originalReceipt.receiptTimeStamp: must be an ISO 8601 date-time (a date alone "
                "is not enough).",
            ),
            (
                {
                    "originalReceipt": {
                        "receiptNumber": "1",
                        "receiptTimeStamp": ORIGINAL_TIME,
                        "branchId": 1,
                    }
                },
                "originalReceipt.branchId: input should be a valid string.",
            ),
            (
                {"originalReceipt": "R-1"},
                "originalReceipt: input should be a valid dictionary "
                "or instance of OriginalReceipt.",
            ),
        ],
    )
    def test_a_malformed_reference_is_refused_with_its_path(
        self, world: World, original: dict[str, Any], expected: str
    ) -> None:
        answer = post(world, return_doc(**original))
        assert answer.status_code == 400
        assert [d for _, d in errors(answer)] == [expected]
        # The token form prefixes the path; nothing was stored either time.
        answer = post(world, token_body(return_doc(**original)))
        assert [d for _, d in errors(answer)] == [f"receipt.{expected}"]
        assert receipt_count(world.services) == 0

    def test_both_ways_at_once_is_refused(self, world: World) -> None:
        doc = return_doc(
            originalReceiptId=str(uuid.uuid4()),
            originalReceipt={"receiptNumber": ORIGINAL_NUMBER, "receiptTimeStamp": ORIGINAL_TIME},
        )
        answer = post(world, doc)
        assert answer.status_code == 400
        assert errors(answer) == [
            (
                "invalid_value",
                "originalReceipt: name the original once, by originalReceiptId or by "
                "originalReceipt, not both.",
            )
        ]
        assert receipt_count(world.services) == 0

    def test_a_plain_purchase_names_no_original(self, world: World) -> None:
        answer = post(world, receipt_doc(originalReceiptId=str(uuid.uuid4())))
        assert answer.status_code == 400
        assert errors(answer) == [
            (
                "invalid_value",
                "originalReceiptId: only a return names an original (type RETURN or "
                "PURCHASE_AND_RETURN, or a row with a negative quantity or amount).",
            )
        ]

    def test_a_purchase_with_a_negative_row_may_name_one(self, world: World) -> None:
        original = posted(world, receipt_doc())["receipt_id"]
        doc = receipt_doc([product_row(), product_row("Pulla", unit_price=250, quantity=-1)])
        doc["originalReceiptId"] = original
        assert posted(world, doc)["original"] == {"status": "linked", "receipt_id": original}

    def test_a_receipt_naming_nothing_answers_as_before(self, world: World) -> None:
        assert "original" not in posted(world, return_doc())


class TestLinking:
    def test_by_id_the_return_reaches_the_purchaser_without_card_data(self, world: World) -> None:
        original = delivered_to_user(world)
        data = posted(world, return_doc(originalReceiptId=original))
        assert data["original"] == {"status": "linked", "receipt_id": original}
        assert data["tokens"] == []
        assert world.owners(data["receipt_id"]) == {world.user.id}

    def test_by_number_and_time_in_any_offset(self, world: World) -> None:
        original = delivered_to_user(world)
        reference = {"receiptNumber": ORIGINAL_NUMBER, "receiptTimeStamp": "2026-01-15T12:03:00Z"}
        data = posted(world, return_doc(originalReceipt=reference))
        assert data["original"] == {"status": "linked", "receipt_id": original}
        assert world.owners(data["receipt_id"]) == {world.user.id}

    def test_equal_numbers_at_two_branches_need_the_branch(self, world: World) -> None:
        first = delivered_to_user(world)
        other_branch = receipt_doc()
        other_branch["merchant"]["branch"]["id"] = "002"
        second = posted(world, other_branch)["receipt_id"]
        reference = {"receiptNumber": ORIGINAL_NUMBER, "receiptTimeStamp": ORIGINAL_TIME}
        ambiguous = posted(world, return_doc(originalReceipt=reference))
        assert ambiguous["original"] == {"status": "original_ambiguous"}
        assert world.owners(ambiguous["receipt_id"]) == set()
        for branch, expected in (("001", first), ("002", second)):
            named = {**reference, "branchId": branch}
            data = posted(world, return_doc(originalReceipt=named))
            assert data["original"] == {"status": "linked", "receipt_id": expected}

    def test_unknown_original_is_a_status_never_an_error(self, world: World) -> None:
        reference = {"receiptNumber": "R-404", "receiptTimeStamp": ORIGINAL_TIME}
        for original in (
            {"originalReceiptId": str(uuid.uuid4())},
            {"originalReceipt": reference},
        ):
            data = posted(world, return_doc(**original))
            assert data["original"] == {"status": "original_not_found"}
            assert world.owners(data["receipt_id"]) == set()

    def test_another_merchants_receipt_is_never_linked_nor_revealed(self, world: World) -> None:
        original = delivered_to_user(world)
        other = make_partner(world.services, PartnerRole.MERCHANT, name="Toinen Oy")
        reference = {"receiptNumber": ORIGINAL_NUMBER, "receiptTimeStamp": ORIGINAL_TIME}
        for body in (return_doc(originalReceiptId=original), return_doc(originalReceipt=reference)):
            # Even claiming the same company id: another partner's receipts are not its own.
            data = posted(world, body, key=other.api_key)
            assert data["original"] == {"status": "original_not_found"}
            assert world.owners(data["receipt_id"]) == set()
            assert world.readers(data["receipt_id"]) == {other.partner.id}

    def test_another_company_of_the_same_partner_is_another_merchant(self, world: World) -> None:
        original = delivered_to_user(world)
        doc = return_doc(originalReceiptId=original)
        doc["merchant"]["companyID"] = "7654321-0"
        data = posted(world, doc)
        assert data["original"] == {"status": "original_not_found"}
        assert world.owners(data["receipt_id"]) == set()

    def test_a_resend_and_an_idempotent_replay_answer_the_same(self, world: World) -> None:
        world.merchant = make_partner(world.services, name="Kauppa Oy", namespaces=["kauppa"])
        original = delivered_to_user(world)
        body = token_body(
            return_doc(originalReceiptId=original),
            {"type": "RECEIPT_ID", "value": "palautus-1", "namespace": "kauppa"},
        )
        first = posted(world, body)
        assert first["original"] == {"status": "linked", "receipt_id": original}
        assert posted(world, body) == first
        headers = {**auth(world.merchant.api_key), "Idempotency-Key": "k-1"}
        missing = return_doc(originalReceiptId=str(uuid.uuid4()))
        replies = [world.client.post(URL, json=missing, headers=headers) for _ in range(2)]
        assert replies[0].json()["original"] == {"status": "original_not_found"}
        assert replies[1].json() == replies[0].json()
        missing_by_link = token_body(
            missing, {"type": "RECEIPT_ID", "value": "palautus-2", "namespace": "kauppa"}
        )
        assert posted(world, missing_by_link)["original"] == {"status": "original_not_found"}
        assert posted(world, missing_by_link)["original"] == {"status": "original_not_found"}


REFUND_AT = datetime(2026, 1, 16, 8, 0, tzinfo=UTC)  # return_doc()'s time


def refund_payment(amount: int = -599, **attributes: Any) -> dict[str, Any]:
    return card_payment(amount, timeStamp="2026-01-16T10:00:00+02:00", **attributes)


def receipt_notifications(calls: list[Received]) -> list[dict[str, Any]]:
    bodies = [orjson.loads(call.body) for call in calls]
    return [b for b in bodies if b["notification_type"] == "receipt_notification"]


class TestFollowingTheOriginal:
    """The return reaches whoever the purchase reached, whichever of the two is delivered
    first; the app hears of it with ``related_receipt_id``."""

    def test_purchase_delivered_first(self, world: World) -> None:
        with Receiver() as endpoint:
            app = webhook_partner(world.services, endpoint.url, name="Kuittisovellus")
            connection = add_connection(world.services, world.user.id, app.partner.id)
            card = world.enroll()
            world.transaction(authorization_code=AUTH_CODE)
            original = world.receipt()
            assert world.matched_card(original) == card
            refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
            assert world.owners(refund) == {world.user.id}
            expected_readers = {world.merchant.partner.id, world.issuer.partner.id, app.partner.id}
            assert world.readers(refund) == expected_readers
            deliver(world.services)
            calls = endpoint.wait_for(3)  # the transaction_notification first
        # The worker sends concurrently: the order of arrival is not the order of queueing.
        bodies = sorted(
            receipt_notifications(calls), key=lambda body: body["receipt_id"] != original
        )
        assert bodies == [
            {
                "notification_type": "receipt_notification",
                "service_id": str(connection.id),
                "receipt_id": original,
            },
            {
                "notification_type": "receipt_notification",
                "service_id": str(connection.id),
                "receipt_id": refund,
                "related_receipt_id": original,
            },
        ]

    def test_return_first_then_the_purchase_matches_in_the_worker(self, world: World) -> None:
        with Receiver() as endpoint:
            app = webhook_partner(world.services, endpoint.url, name="Kuittisovellus")
            connection = add_connection(world.services, world.user.id, app.partner.id)
            world.enroll()
            original = world.receipt(match=False)
            refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
            assert world.owners(refund) == set()
            assert world.readers(refund) == {world.merchant.partner.id}
            world.transaction(authorization_code=AUTH_CODE)  # the purchase is matched now
            assert world.owners(original) == {world.user.id}
            assert world.owners(refund) == {world.user.id}
            expected_readers = {world.merchant.partner.id, world.issuer.partner.id, app.partner.id}
            assert world.readers(refund) == expected_readers
            deliver(world.services)
            calls = endpoint.wait_for(3)
        bodies = receipt_notifications(calls)
        related = {body["receipt_id"]: body.get("related_receipt_id") for body in bodies}
        assert related == {original: None, refund: original}
        assert {body["service_id"] for body in bodies} == {str(connection.id)}

    def test_a_card_without_a_holder_gives_the_issuer_the_return(self, world: World) -> None:
        world.enroll(link=False)
        world.transaction(authorization_code=AUTH_CODE)
        original = world.receipt()
        refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
        assert world.owners(refund) == set()
        assert world.readers(refund) == {world.merchant.partner.id, world.issuer.partner.id}

    def test_a_removed_card_gives_nothing_more(self, world: World) -> None:
        card = world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        original = world.receipt()
        removed = world.client.delete(f"/api/v1/cards/{card}/", headers=auth(world.issuer.api_key))
        assert removed.status_code == 200, removed.text
        refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
        # The holder keeps her purchase, so she gets the return; the issuer's right has ended.
        assert world.owners(refund) == {world.user.id}
        assert world.readers(refund) == {world.merchant.partner.id}


class TestRefundCardLinking:
    def test_a_refund_with_a_known_original_still_matches_its_clearing(self, world: World) -> None:
        card = world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        original = world.receipt()
        world.clock.set(REFUND_AT + timedelta(minutes=1))
        payment = refund_payment(authorizationCode="R9Z8Y7", referenceNumber="260116100000")
        doc = return_doc(payments=[payment], originalReceiptId=original)
        refund = posted(world, doc)["receipt_id"]
        assert world.owners(refund) == {world.user.id}  # at once, by the link
        world.transaction(kind="clearing", amount=-599, at=REFUND_AT, authorization_code="R9Z8Y7")
        assert world.matched_card(refund) == card
        assert world.owners(refund) == {world.user.id}

    def test_a_refund_that_fits_nothing_reaches_the_purchaser_anyway(self, world: World) -> None:
        world.enroll()
        world.transaction(authorization_code=AUTH_CODE)
        original = world.receipt()
        world.clock.set(REFUND_AT + timedelta(minutes=1))
        doc = return_doc(payments=[refund_payment(MID="MID-ELSEWHERE")], originalReceiptId=original)
        refund = posted(world, doc)["receipt_id"]
        world.settle()
        assert world.matched_card(refund) is None
        assert world.why(refund) == "no_candidate"
        assert world.owners(refund) == {world.user.id}


class TestExplain:
    def test_kuitti_receipts_explain_shows_the_relation_both_ways(self, world: World) -> None:
        original = posted(world, receipt_doc())["receipt_id"]
        refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
        data = run_json(world.services, "receipts", "explain", refund)
        assert data["original"] == {
            "receipt_id": original,
            "receipt_number": ORIGINAL_NUMBER,
            "receipt_time": ORIGINAL_TIME,
        }
        assert data["returns"] == []
        data = run_json(world.services, "receipts", "explain", original)
        assert data["original"] is None
        assert [r["receipt_id"] for r in data["returns"]] == [refund]
        human = run(world.services, "receipts", "explain", original).output
        assert f"returned by receipt {refund} (R-2026-0107, 2026-01-16T10:00:00+02:00)" in human
        human = run(world.services, "receipts", "explain", refund).output
        assert f"return of receipt {original} ({ORIGINAL_NUMBER}, {ORIGINAL_TIME})" in human


class TestTheList:
    def test_the_list_shows_the_relation_both_ways(self, world: World) -> None:
        original = delivered_to_user(world)
        refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
        plain = posted(world, receipt_doc(receiptNumber="R-2026-0200"))["receipt_id"]
        answer = world.client.get(URL, headers=auth(world.merchant.api_key))
        assert answer.status_code == 200, answer.text
        listed = {item["receipt_id"]: item for item in answer.json()["receipts"]}
        assert listed[refund]["original_receipt_id"] == original
        assert listed[original]["return_receipt_ids"] == [refund]
        assert "original_receipt_id" not in listed[original]
        assert set(listed[plain]) == {
            "receipt_id",
            "merchant_name",
            "receipt_time",
            "total",
            "currency",
        }

    def test_a_relation_to_a_receipt_the_reader_cannot_see_is_left_out(self, world: World) -> None:
        """The return reached the purchaser's app; the purchase was posted before the user
        connected it, so the app reads the return alone and learns nothing of the purchase."""
        original = delivered_to_user(world)
        app = webhook_partner(world.services, "http://127.0.0.1:9/hook", name="Kuittisovellus")
        add_connection(world.services, world.user.id, app.partner.id)
        refund = posted(world, return_doc(originalReceiptId=original))["receipt_id"]
        answer = world.client.get(URL, headers=auth(app.api_key))
        assert answer.status_code == 200, answer.text
        assert answer.json()["receipts"] == [
            {
                "receipt_id": refund,
                "merchant_name": "Kauppa Oy",
                "receipt_time": "2026-01-16T10:00:00+02:00",
                "total": answer.json()["receipts"][0]["total"],
                "currency": "EUR",
            }
        ]


class TestRacingArrivals:
    def test_a_return_and_its_purchases_match_arriving_together(self, world: World) -> None:
        """The return's link and the transaction that delivers its purchase race on real
        threads through the server: whichever commits second sees the other, every round."""
        world.enroll()
        url = world.client.base_url
        with (
            httpx.Client(base_url=url, timeout=30) as a,
            httpx.Client(base_url=url, timeout=30) as b,
        ):
            for n in range(RACE_ROUNDS):
                original, refund = self.race_once(world, a, b, f"C{n:05d}")
                assert world.owners(original) == {world.user.id}, f"round {n}"
                assert world.owners(refund) == {world.user.id}, f"round {n}"

    @staticmethod
    def race_once(world: World, a: httpx.Client, b: httpx.Client, code: str) -> tuple[str, str]:
        doc = receipt_doc(receiptNumber=f"R-{code}")
        doc["payments"][0]["attributes"]["authorizationCode"] = code
        original = world.receipt(doc)  # it waits: no transaction yet
        refund = return_doc(originalReceiptId=original)
        txn = {
            "partner_card_id": "card-1",
            "transaction_type": "auth",
            "amount": doc["totalPriceIncVAT"],
            "currency": "EUR",
            "timestamp": iso(PAID_AT),
            "merchant_id": MID,
            "merchant_name": "Kauppa",
            "authorization_code": code,
        }
        refund_answer, txn_answer = race(
            lambda: a.post(URL, json=refund, headers=auth(world.merchant.api_key)),
            lambda: b.post(
                "/api/v1/card-transactions/", json=txn, headers=auth(world.issuer.api_key)
            ),
        )
        assert refund_answer.status_code == 200, refund_answer.text
        assert txn_answer.status_code == 200, txn_answer.text
        refund_id: str = refund_answer.json()["receipt_id"]
        return original, refund_id
