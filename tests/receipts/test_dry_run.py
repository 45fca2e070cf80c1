"""``POST /api/v1/receipts/validate``: the receipt post's checks, storing and sending nothing.

The central promise: for every invalid body of the test corpus (the field rules of
``test_validation``, the request shapes and tokens of ``test_create``, the fuzzer's mutations of
``test_fuzz``), the dry run answers exactly what the post answers, status and body."""

from __future__ import annotations

import copy
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from sqlalchemy import func, select

from kuitti.db import Base
from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.conftest import StatementCounter
from tests.factories import auth, card_payment, make_partner, many_rows, receipt_doc, token_body
from tests.posting.test_create import MALFORMED_JSON, MALFORMED_TOKENS, NOT_AN_OBJECT
from tests.receipts.test_fuzz import mutated_bodies
from tests.receipts.test_validation import SHAPE_CASES, attachment, mutated, verification
from tests.test_cli import run

POST = "/api/v1/receipts/"
VALIDATE = "/api/v1/receipts/validate"
VISA = "4111111111111111"
JSON = {"Content-Type": "application/json"}
A_USER_TOKEN = (
    "eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJub2JvZHkifQ.c2lnbmF0dXJl"  # well formed, signed by no one
)


def row_counts(services: Services) -> dict[str, int]:
    """Rows in every table: what "stores nothing" is checked against."""
    with services.db.session(write=False) as session:
        return {
            table.name: session.scalar(select(func.count()).select_from(table)) or 0
            for table in Base.metadata.sorted_tables
        }


def post_raw(client: httpx.Client, url: str, key: str, content: bytes) -> httpx.Response:
    return client.post(url, content=content, headers={**auth(key), **JSON})


def assert_same_answer(client: httpx.Client, key: str, content: bytes, case: str) -> int:
    """Validate, then post the same bytes: identical refusals, or both accept."""
    dry = post_raw(client, VALIDATE, key, content)
    real = post_raw(client, POST, key, content)
    if real.status_code == 200:
        assert dry.status_code == 200, (case, dry.text)
        assert dry.json()["valid"] is True, case
    else:
        assert (dry.status_code, dry.json()) == (real.status_code, real.json()), case
    return real.status_code


def corpus() -> Iterator[tuple[str, bytes]]:
    """Every invalid body the receipt tests name, as the bytes a till would send."""
    for name, change, _code, _path in SHAPE_CASES:
        yield f"field rule: {name}", json.dumps(mutated(change)).encode()
    for name, raw in MALFORMED_JSON.items():
        yield f"malformed JSON: {name}", raw
    for name, value in NOT_AN_OBJECT.items():
        yield f"not an object: {name}", json.dumps(value).encode()
    for token, fragment in MALFORMED_TOKENS:
        body = token_body(receipt_doc(), token)
        yield f"malformed token ({fragment})", json.dumps(body).encode()
    doc = receipt_doc()
    arithmetic = {
        "VAT off by one": mutated(lambda d: d.update(totalVATAmount=d["totalVATAmount"] + 1)),
        "product row": mutated(lambda d: d["products"][1].update(totalAmountIncVAT=1)),
        "payments short": receipt_doc(
            payments=[card_payment(doc["totalPriceIncVAT"] - 100), card_payment(99)]
        ),
        "AC without begin": receipt_doc(verifications=[verification(currentType="AC")]),
        "attachments not enabled": receipt_doc(attachments=[attachment()]),
        "several faults": mutated(
            lambda d: d.update(receiptNumber=None, currencyISOCode="XXY", totalVATAmount="5")
        ),
        "card number in free text": receipt_doc(freeText="Kortti 4111 1111 1111 1111"),
        "card number under a card key": receipt_doc(cardNumber=VISA),
        "card token with a full number": token_body(
            receipt_doc(), {"type": "CARD", "id": "c-1", "value": VISA}
        ),
        "token form without receipt": {"attributes": {"tokens": []}},
        "tokens not an array": {"attributes": {"tokens": {}}, "receipt": receipt_doc()},
        "too many tokens": token_body(
            receipt_doc(), *[{"type": "EMAIL", "value": "a@example.com"}] * 51
        ),
        "token and receipt faults": token_body(
            mutated(lambda d: d.pop("receiptNumber")), {"type": "CARD", "value": "1"}
        ),
        "namespace of another partner": token_body(
            receipt_doc(), {"type": "RECEIPT_ID", "namespace": "theirs", "value": "1"}
        ),
        "used receipt identifier, changed receipt": token_body(
            receipt_doc(receiptNumber="R-changed"),
            {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "used"},
        ),
    }
    for name, body in arithmetic.items():
        yield name, json.dumps(body).encode()
    big = json.dumps(doc).replace(
        f'"totalVATAmount": {doc["totalVATAmount"]}', '"totalVATAmount": ' + "9" * 40
    )
    yield "integer beyond 64 bits", big.encode()


def test_every_corpus_body_gets_the_posts_answer(client: httpx.Client, services: Services) -> None:
    make_partner(services, namespaces=["theirs"], name="Other")
    merchant = make_partner(services, namespaces=["kauppa"])
    used = token_body(receipt_doc(), {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "used"})
    assert post_raw(client, POST, merchant.api_key, json.dumps(used).encode()).status_code == 200
    statuses = [
        assert_same_answer(client, merchant.api_key, content, case) for case, content in corpus()
    ]
    assert set(statuses) == {400}  # the corpus is invalid throughout


def test_fuzzed_bodies_get_the_posts_answer(client: httpx.Client, services: Services) -> None:
    """The fuzzer's mutations of a valid receipt (a fixed seed), valid or not."""
    merchant = make_partner(services, namespaces=["kauppa"])
    seen: set[int] = set()

    @settings(
        max_examples=120,
        deadline=None,
        derandomize=True,
        suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
    )
    @given(body=mutated_bodies())
    def check(body: Any) -> None:
        seen.add(assert_same_answer(client, merchant.api_key, json.dumps(body).encode(), "fuzz"))

    check()
    assert seen == {200, 400}  # both kinds were compared


class TestRequestChecks:
    """The same key, content type and size limit as the post."""

    @pytest.mark.parametrize(
        ("key", "headers", "content"),
        [
            (None, JSON, b"{}"),
            ("kt_not-a-real-key", JSON, b"{}"),
            ("merchant", {"Content-Type": "text/plain"}, json.dumps(receipt_doc()).encode()),
            ("merchant", JSON, json.dumps(receipt_doc(freeText="x" * 1_100_000)).encode()),
        ],
        ids=["no key", "wrong key", "not JSON", "too large"],
    )
    def test_same_refusal_as_the_post(
        self,
        client: httpx.Client,
        services: Services,
        key: str | None,
        headers: dict[str, str],
        content: bytes,
    ) -> None:
        merchant = make_partner(services)
        if key is not None:
            headers = {**auth(merchant.api_key if key == "merchant" else key), **headers}
        dry = client.post(VALIDATE, content=content, headers=headers)
        real = client.post(POST, content=content, headers=headers)
        assert dry.status_code == real.status_code
        assert dry.status_code in {401, 413, 415}
        assert dry.json() == real.json()

    def test_partner_without_merchant_role(self, client: httpx.Client, services: Services) -> None:
        app = make_partner(services, PartnerRole.APP, name="App")
        content = json.dumps(receipt_doc()).encode()
        dry = post_raw(client, VALIDATE, app.api_key, content)
        assert dry.status_code == 403
        assert dry.json() == post_raw(client, POST, app.api_key, content).json()

    def test_without_trailing_slash_too(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        content = json.dumps(receipt_doc()).encode()
        response = post_raw(client, VALIDATE + "/", merchant.api_key, content)
        assert response.json() == {"valid": True, "warnings": []}


def test_a_valid_body_stores_and_sends_nothing(
    client: httpx.Client, services: Services, sql: StatementCounter
) -> None:
    """Every token kind and a card payment: the post would write rows in a dozen tables."""
    merchant = make_partner(services, namespaces=["kauppa"])
    body = token_body(
        receipt_doc(),
        {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-1"},
        {"type": "EMAIL", "value": "maija@example.com"},
        {"type": "USER", "token": A_USER_TOKEN},
        {"type": "CARD", "id": "c-1", "value": "415301******1234"},
        {"type": "DYNAMIC_QR_CODE", "namespace": "kauppa", "value": "q"},
    )
    before = row_counts(services)
    with sql.counting() as statements:
        response = client.post(
            VALIDATE, json=body, headers={**auth(merchant.api_key), "Idempotency-Key": "k-1"}
        )
    assert response.status_code == 200, response.text
    assert response.json() == {"valid": True, "warnings": []}
    assert row_counts(services) == before
    # It only read: no write statement, and no lock taken (PostgreSQL's advisory locks).
    verbs = {statement.split()[0].upper() for statement in statements}
    assert verbs <= {"SELECT", "BEGIN", "COMMIT", "ROLLBACK"}, verbs
    assert "SELECT" in verbs  # the namespace and identifier checks did read
    assert not [s for s in statements if "advisory" in s]
    # The same body and key still post: the dry run left no idempotency record behind.
    posted = client.post(
        POST, json=body, headers={**auth(merchant.api_key), "Idempotency-Key": "k-1"}
    )
    assert posted.status_code == 200
    assert row_counts(services)["receipts"] == 1


class TestReceiptIdentifiers:
    def test_unchanged_resend_is_valid_with_a_warning(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        body = token_body(
            receipt_doc(), {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-1"}
        )
        receipt_id = client.post(POST, json=body, headers=auth(merchant.api_key)).json()[
            "receipt_id"
        ]
        response = client.post(VALIDATE, json=body, headers=auth(merchant.api_key))
        assert response.status_code == 200
        warning = response.json()["warnings"][0]
        assert warning["code"] == "unchanged_resend"
        assert warning["path"] == "attributes.tokens"
        assert receipt_id in warning["message"]

    def test_identifier_used_by_another_receipt(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-1"}
        client.post(POST, json=token_body(receipt_doc(), token), headers=auth(merchant.api_key))
        changed = token_body(receipt_doc(receiptNumber="R-2"), token)
        response = client.post(VALIDATE, json=changed, headers=auth(merchant.api_key))
        assert response.status_code == 400
        assert response.json()["error"] == "duplicate_receipt_id"


def _row(**changes: Any) -> dict[str, Any]:
    doc = receipt_doc(many_rows(2))
    doc["products"][0].update(changes)
    return doc


class TestWarnings:
    def warnings(self, client: httpx.Client, key: str, body: Any) -> list[dict[str, str]]:
        response = client.post(VALIDATE, json=body, headers=auth(key))
        assert response.status_code == 200, response.text
        assert response.json()["valid"] is True
        warnings: list[dict[str, str]] = response.json()["warnings"]
        return warnings

    def test_negative_quantity_on_a_purchase(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        doc = _row(quantity="-1")
        assert self.warnings(client, merchant.api_key, doc) == [
            {
                "code": "negative_quantity",
                "path": "products[0].quantity",
                "message": "a negative quantity on a PURCHASE; a returned item belongs on a "
                "RETURN receipt.",
            }
        ]
        # On a RETURN the same row is what one expects.
        doc["type"] = "RETURN"
        assert self.warnings(client, merchant.api_key, doc) == []

    def test_negative_discount_in_the_token_form(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        doc = _row(discounts=[{"amount": -50, "description": "Lisämaksu"}])
        found = self.warnings(client, merchant.api_key, token_body(doc))
        assert [(w["code"], w["path"]) for w in found] == [
            ("negative_discount", "receipt.products[0].discounts[0].amount")
        ]

    @pytest.mark.parametrize(
        ("currency", "price", "warned"),
        [("EUR", "0.001", True), ("JPY", "1.5", True), ("EUR", "0.01", False), ("JPY", "2", False)],
    )
    def test_precision_beyond_the_currency(
        self, client: httpx.Client, services: Services, currency: str, price: str, warned: bool
    ) -> None:
        merchant = make_partner(services)
        doc = _row(unitPriceIncVATDecimal=price)
        doc["currencyISOCode"] = currency
        doc["payments"][0]["attributes"]["currencyISOCode"] = currency
        codes = [w["code"] for w in self.warnings(client, merchant.api_key, doc)]
        assert codes == (["sub_unit_precision"] if warned else [])

    @pytest.mark.parametrize(("amount", "warned"), [(1003, True), (1005, False)])
    def test_cash_rounding(
        self, client: httpx.Client, services: Services, amount: int, warned: bool
    ) -> None:
        """Swiss francs are paid in cash in steps of five centimes."""
        merchant = make_partner(services)
        doc = receipt_doc(currencyISOCode="CHF", payments=[{"type": "CASH", "amount": amount}])
        doc["payments"].append({"type": "GIFT_CARD", "amount": doc["totalPriceIncVAT"] - amount})
        codes = [w["code"] for w in self.warnings(client, merchant.api_key, doc)]
        assert codes == (["cash_rounding"] if warned else [])

    def test_negative_purchase_total(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        row = _row()["products"][0]
        negative = copy.deepcopy(row)
        negative["quantity"] = "-3"
        for key in ("totalAmountExcVAT", "totalAmountIncVAT"):
            negative[key] *= -3
        negative["vats"][0] = {
            k: v * -3 if isinstance(v, int) else v for k, v in row["vats"][0].items()
        }
        doc = receipt_doc([row, negative], payments=None)
        codes = [w["code"] for w in self.warnings(client, merchant.api_key, doc)]
        assert codes == ["negative_total", "negative_quantity"]


class TestCommandLine:
    """``kuitti receipts validate``: offline by default, database-backed with --partner."""

    def files(self, tmp_path: Path, **bodies: Any) -> list[str]:
        paths = []
        for name, body in bodies.items():
            path = tmp_path / f"{name}.json"
            path.write_bytes(body if isinstance(body, bytes) else json.dumps(body).encode())
            paths.append(str(path))
        return paths

    def test_offline_errors_and_warnings(self, services: Services, tmp_path: Path) -> None:
        bad = receipt_doc()
        bad["totalPriceIncVAT"] += 1
        paths = self.files(tmp_path, good=_row(quantity="-1"), bad=bad, broken=b"{")
        result = run(services, "receipts", "validate", *paths, "--json")
        assert result.exit_code == 1
        data = orjson.loads(result.stdout)
        assert data["valid"] is False
        assert data["database_checks"] is False
        assert "namespace ownership" in data["skipped"][0]
        good, worse, broken = data["files"]
        assert good["valid"] is True
        assert [w["code"] for w in good["warnings"]] == ["negative_quantity"]
        assert {e["error"] for e in worse["errors"]} == {"inconsistent_totals"}
        assert broken["errors"][0]["error"] == "malformed_json"

    def test_offline_errors_are_the_posts(
        self, client: httpx.Client, services: Services, tmp_path: Path
    ) -> None:
        merchant = make_partner(services)
        cases = dict(list(corpus())[:12])
        paths = self.files(tmp_path, **{f"case{i}": body for i, body in enumerate(cases.values())})
        data = orjson.loads(run(services, "receipts", "validate", *paths, "--json").stdout)
        for item, content in zip(data["files"], cases.values(), strict=True):
            answer = post_raw(client, POST, merchant.api_key, content).json()
            assert item["errors"] == (answer if isinstance(answer, list) else [answer])

    def test_human_output_and_success(self, services: Services, tmp_path: Path) -> None:
        paths = self.files(tmp_path, fine=receipt_doc())
        result = run(services, "receipts", "validate", *paths)
        assert result.exit_code == 0, result.output
        assert f"{paths[0]}: valid" in result.stdout
        assert "note: namespace ownership" in result.stdout

    def test_with_a_partner_the_database_checks_run(
        self, client: httpx.Client, services: Services, tmp_path: Path
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-1"}
        client.post(POST, json=token_body(receipt_doc(), token), headers=auth(merchant.api_key))
        foreign = token_body(receipt_doc(), {**token, "namespace": "theirs"})
        paths = self.files(tmp_path, resend=token_body(receipt_doc(), token), foreign=foreign)
        offline = orjson.loads(run(services, "receipts", "validate", *paths, "--json").stdout)
        assert offline["valid"] is True  # nothing to say without the database
        result = run(
            services, "receipts", "validate", *paths, "--partner", str(merchant.partner.id),
            "--json",
        )  # fmt: skip
        assert result.exit_code == 1
        data = orjson.loads(result.stdout)
        assert data["database_checks"] is True
        assert data["skipped"] == []
        resend, refused = data["files"]
        assert [w["code"] for w in resend["warnings"]] == ["unchanged_resend"]
        assert refused["errors"][0]["error"] == "unknown_namespace"

    def test_unknown_partner_or_missing_file(self, services: Services, tmp_path: Path) -> None:
        paths = self.files(tmp_path, fine=receipt_doc())
        result = run(services, "receipts", "validate", *paths, "--partner", "nope")
        assert result.exit_code == 2
        assert "no partner" in result.output
        result = run(services, "receipts", "validate", str(tmp_path / "absent.json"))
        assert result.exit_code == 2


def test_described_in_openapi(client: httpx.Client, services: Services) -> None:
    schema = client.get("/openapi.json").json()
    operation = schema["paths"]["/api/v1/receipts/validate"]["post"]
    body = operation["requestBody"]["content"]["application/json"]["schema"]
    assert (
        body
        == schema["paths"]["/api/v1/receipts/"]["post"]["requestBody"]["content"][
            "application/json"
        ]["schema"]
    )
    answer = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert answer == {"$ref": "#/components/schemas/ReceiptValid"}
    warning = schema["components"]["schemas"]["ValidationWarning"]
    assert set(warning["required"]) == {"code", "path", "message"}
    assert operation["security"] == [{"MerchantToken": []}]
