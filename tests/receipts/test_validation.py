"""The receipt document's rules, called as the plain function ingest uses."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import pytest

from kuitti.errors import InvalidRequest
from kuitti.receipts.schema import Receipt
from kuitti.receipts.validation import parse_receipt_request
from tests.factories import card_payment, many_rows, product_row, receipt_doc

Mutation = Callable[[dict[str, Any]], None]


def errors_of(doc: Any, *, attachments: bool = False) -> list[dict[str, str]]:
    with pytest.raises(InvalidRequest) as caught:
        parse_receipt_request(orjson.dumps(doc), attachments_enabled=attachments)
    return [e.as_json() for e in caught.value.details()]


def only_error(doc: Any, **kwargs: bool) -> tuple[str, str]:
    errors = errors_of(doc, **kwargs)
    assert len(errors) == 1, errors
    return errors[0]["error"], errors[0]["decription"].split(":")[0]


def mutated(change: Mutation) -> dict[str, Any]:
    doc = receipt_doc()
    change(doc)
    return doc


def journey() -> dict[str, Any]:
    return {
        "type": "TAXI",
        "origin": {"name": "Kamppi", "datetime": "2026-01-15T13:40:00+02:00"},
        "destination": {"name": "Airport"},
        "vehicle": {"id": "v1", "licensePlate": "ABC-123", "category": "SEDAN"},
        "driver": {"id": "d1"},
        "distance": 18500,
        "duration": 24.5,
        "CO2Emissions": 2100,
    }


def attachment(**extra: Any) -> dict[str, Any]:
    return {"type": "QRCODE", "kind": "TICKET", "title": "Lippu", "data": "T-1", **extra}


def verification(**extra: Any) -> dict[str, Any]:
    item = {
        "type": "OCMF",
        "version": "1.0",
        "publicKey": "3059...",
        "transactionId": "t1",
        "currentType": "DC",
        "transactionEnd": {"signedData": "OCMF|{}|{}"},
    }
    item.update(extra)
    return item


class TestValidDocuments:
    def test_every_optional_part(self) -> None:
        row = product_row(
            EANCode="6411300000494",
            productId="p-1",
            freeText="Tarjous",
            categorization={"main": "food", "product": "coffee", "sub": 3, "tags": ["stamp"]},
            unitPriceIncVATDecimal="5.99",
            discounts=[{"amount": 50, "percentage": "10", "description": "Kanta-asiakas"}],
            customAttributes=[{"väri": "punainen"}],
            journey=journey(),
        )
        doc = receipt_doc(
            [row],
            freeText="Kiitos käynnistä",
            customAttributes=[{"kassa": "3"}],
            attachments=[attachment(validUntil="2026-02-01T00:00:00Z", description="Näytä")],
            verifications=[verification(currentType="AC", transactionBegin={"signedData": "x"})],
        )
        doc["merchant"]["branch"].update(
            subName="Aina auki",
            email="tuki@example.com",
            phone="+358 9 123",
            websiteURL="https://x",
        )
        doc["payments"].append({"type": "CASH", "amount": 0, "attributes": {"handedAmount": 1000}})
        doc["payments"].append({"type": "GIFT_CARD", "amount": 0, "attributes": {"code": "G1"}})
        request = parse_receipt_request(orjson.dumps(doc), attachments_enabled=True)
        assert request.receipt.products[0].get("journey") is not None
        assert request.document == doc

    def test_sixty_rows_and_three_rates(self) -> None:
        request = parse_receipt_request(
            orjson.dumps(receipt_doc(many_rows(60))), attachments_enabled=False
        )
        assert len(request.receipt.vats) == 3

    @pytest.mark.parametrize(
        "stamp",
        ["2026-01-15T14:03:00Z", "2026-01-15T14:03:00.123+02:00", "2026-01-15 14:03:00-05:00"],
    )
    def test_date_time_forms(self, stamp: str) -> None:
        parse_receipt_request(
            orjson.dumps(receipt_doc(receiptTimeStamp=stamp)), attachments_enabled=False
        )


# (mutation, expected error code, JSON path of the error)
SHAPE_CASES: list[tuple[str, Mutation, str, str]] = [
    ("merchant missing", lambda d: d.pop("merchant"), "missing_field", "merchant"),
    ("products missing", lambda d: d.pop("products"), "missing_field", "products"),
    ("products empty", lambda d: d.update(products=[]), "invalid_value", "products"),
    ("vats missing", lambda d: d.pop("vats"), "missing_field", "vats"),
    ("receiptNumber missing", lambda d: d.pop("receiptNumber"), "missing_field", "receiptNumber"),
    (
        "receiptNumber blank",
        lambda d: d.update(receiptNumber="  "),
        "invalid_value",
        "receiptNumber",
    ),
    ("receiptNumber number", lambda d: d.update(receiptNumber=12), "invalid_type", "receiptNumber"),
    ("type unknown", lambda d: d.update(type="SALE"), "invalid_value", "type"),
    ("type number", lambda d: d.update(type=1), "invalid_type", "type"),
    (
        "currency unknown",
        lambda d: d.update(currencyISOCode="EUX"),
        "invalid_value",
        "currencyISOCode",
    ),
    (
        "currency lower",
        lambda d: d.update(currencyISOCode="eur"),
        "invalid_value",
        "currencyISOCode",
    ),
    (
        "time without offset",
        lambda d: d.update(receiptTimeStamp="2026-01-15T14:03:00"),
        "invalid_value",
        "receiptTimeStamp",
    ),
    (
        "date only",
        lambda d: d.update(receiptTimeStamp="2026-01-15"),
        "invalid_value",
        "receiptTimeStamp",
    ),
    (
        "time garbage",
        lambda d: d.update(receiptTimeStamp="yesterday"),
        "invalid_value",
        "receiptTimeStamp",
    ),
    ("total as string", lambda d: d.update(totalVATAmount="5"), "invalid_type", "totalVATAmount"),
    (
        "total as float",
        lambda d: d.update(totalPriceExcVAT=1.5),
        "invalid_type",
        "totalPriceExcVAT",
    ),
    (
        "total as bool",
        lambda d: d.update(totalPriceIncVAT=True),
        "invalid_type",
        "totalPriceIncVAT",
    ),
    ("merchant not object", lambda d: d.update(merchant="Kauppa"), "invalid_type", "merchant"),
    ("merchant name", lambda d: d["merchant"].pop("name"), "missing_field", "merchant.name"),
    ("companyID", lambda d: d["merchant"].pop("companyID"), "missing_field", "merchant.companyID"),
    (
        "branch posId",
        lambda d: d["merchant"]["branch"].pop("posId"),
        "missing_field",
        "merchant.branch.posId",
    ),
    (
        "branch address city",
        lambda d: d["merchant"]["branch"]["address"].pop("city"),
        "missing_field",
        "merchant.branch.address.city",
    ),
    ("product name", lambda d: d["products"][1].pop("name"), "missing_field", "products[1].name"),
    (
        "product quantity number",
        lambda d: d["products"][0].update(quantity=2),
        "invalid_type",
        "products[0].quantity",
    ),
    (
        "product quantity text",
        lambda d: d["products"][0].update(quantity="two"),
        "invalid_value",
        "products[0].quantity",
    ),
    (
        "product quantityCode",
        lambda d: d["products"][0].pop("quantityCode"),
        "missing_field",
        "products[0].quantityCode",
    ),
    (
        "product vats empty",
        lambda d: d["products"][0].update(vats=[]),
        "invalid_value",
        "products[0].vats",
    ),
    (
        "VATRate percent sign",
        lambda d: d["products"][0]["vats"][0].update(VATRate="14%"),
        "invalid_value",
        "products[0].vats[0].VATRate",
    ),
    (
        "VATRate comma",
        lambda d: d["vats"][0].update(VATRate="25,5"),
        "invalid_value",
        "vats[0].VATRate",
    ),
    (
        "VATRate number",
        lambda d: d["vats"][0].update(VATRate=14),
        "invalid_type",
        "vats[0].VATRate",
    ),
    (
        "discount description",
        lambda d: d["products"][0].update(discounts=[{"amount": 1}]),
        "missing_field",
        "products[0].discounts[0].description",
    ),
    (
        "categorization product",
        lambda d: d["products"][0].update(categorization={"main": "x"}),
        "missing_field",
        "products[0].categorization.product",
    ),
    (
        "categorization sub letters",
        lambda d: d["products"][0].update(categorization={"product": "x", "sub": "1a"}),
        "invalid_value",
        "products[0].categorization.sub",
    ),
    (
        "categorization sub float",
        lambda d: d["products"][0].update(categorization={"product": "x", "sub": 1.5}),
        "invalid_type",
        "products[0].categorization.sub",
    ),
    (
        "custom attribute two pairs",
        lambda d: d.update(customAttributes=[{"a": "1", "b": "2"}]),
        "invalid_value",
        "customAttributes[0]",
    ),
    (
        "custom attribute number value",
        lambda d: d.update(customAttributes=[{"a": 1}]),
        "invalid_type",
        "customAttributes[0].a",
    ),
    (
        "journey type",
        lambda d: d["products"][0].update(journey={**journey(), "type": "SHIP"}),
        "invalid_value",
        "products[0].journey.type",
    ),
    (
        "journey origin",
        lambda d: d["products"][0].update(
            journey={k: v for k, v in journey().items() if k != "origin"}
        ),
        "missing_field",
        "products[0].journey.origin",
    ),
    (
        "vehicle plate",
        lambda d: d["products"][0].update(journey={**journey(), "vehicle": {"id": "v"}}),
        "missing_field",
        "products[0].journey.vehicle.licensePlate",
    ),
    (
        "vehicle powertrain",
        lambda d: d["products"][0].update(
            journey={
                **journey(),
                "vehicle": {"id": "v", "licensePlate": "A", "powertrain": "STEAM"},
            }
        ),
        "invalid_value",
        "products[0].journey.vehicle.powertrain",
    ),
    (
        "journey distance text",
        lambda d: d["products"][0].update(journey={**journey(), "distance": "far"}),
        "invalid_type",
        "products[0].journey.distance",
    ),
    (
        "location datetime",
        lambda d: d["products"][0].update(
            journey={**journey(), "destination": {"name": "x", "datetime": "12:00"}}
        ),
        "invalid_value",
        "products[0].journey.destination.datetime",
    ),
    (
        "payment amount",
        lambda d: d["payments"][0].pop("amount"),
        "missing_field",
        "payments[0].amount",
    ),
    (
        "payment type lower",
        lambda d: d["payments"].append({"type": "cash", "amount": 0}),
        "invalid_value",
        "payments[1].type",
    ),
    (
        "card MID number",
        lambda d: d["payments"][0]["attributes"].update(MID=123),
        "invalid_type",
        "payments[0].attributes.MID",
    ),
    (
        "card timeStamp",
        lambda d: d["payments"][0]["attributes"].update(timeStamp="2026-01-15 14:00"),
        "invalid_value",
        "payments[0].attributes.timeStamp",
    ),
    (
        "card preauth text",
        lambda d: d["payments"][0]["attributes"].update(preAuthorizedAmount="100"),
        "invalid_type",
        "payments[0].attributes.preAuthorizedAmount",
    ),
    (
        "full card number",
        lambda d: d["payments"][0]["attributes"].update(maskedPAN="4153011234561234"),
        "invalid_value",
        "payments[0].attributes.maskedPAN",
    ),
    (
        "cash handed text",
        lambda d: d["payments"].append(
            {"type": "CASH", "amount": 0, "attributes": {"handedAmount": "10"}}
        ),
        "invalid_type",
        "payments[1].attributes.handedAmount",
    ),
    (
        "loyalty pan",
        lambda d: d["payments"].append(
            {"type": "LOYALTY", "amount": 0, "attributes": {"maskedPAN": "abc"}}
        ),
        "invalid_value",
        "payments[1].attributes.maskedPAN",
    ),
    (
        "attachment kind",
        lambda d: d.update(attachments=[attachment(kind="COUPON")]),
        "invalid_value",
        "attachments[0].kind",
    ),
    (
        "attachment data",
        lambda d: d.update(attachments=[{k: v for k, v in attachment().items() if k != "data"}]),
        "missing_field",
        "attachments[0].data",
    ),
    (
        "verification currentType",
        lambda d: d.update(verifications=[verification(currentType="XX")]),
        "invalid_value",
        "verifications[0].currentType",
    ),
    (
        "verification end",
        lambda d: d.update(
            verifications=[{k: v for k, v in verification().items() if k != "transactionEnd"}]
        ),
        "missing_field",
        "verifications[0].transactionEnd",
    ),
    (
        "AC needs begin",
        lambda d: d.update(verifications=[verification(currentType="AC")]),
        "missing_field",
        "verifications[0].transactionBegin",
    ),
]


@pytest.mark.parametrize(
    ("change", "code", "path"),
    [case[1:] for case in SHAPE_CASES],
    ids=[case[0] for case in SHAPE_CASES],
)
def test_field_rules(change: Mutation, code: str, path: str) -> None:
    assert only_error(mutated(change), attachments=True) == (code, path)


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (
            lambda d: d["products"].__setitem__(0, "Maito"),
            "products[0]: input should be a valid dictionary or instance of Product.",
        ),
        (
            lambda d: d["products"][0]["vats"].__setitem__(0, None),
            "products[0].vats[0]: input should be a valid dictionary or instance of ProductVat.",
        ),
        (
            lambda d: d["vats"].__setitem__(0, 12),
            "vats[0]: input should be a valid dictionary or instance of ReceiptVat.",
        ),
    ],
)
def test_a_row_that_is_not_an_object(change: Mutation, expected: str) -> None:
    """Rows are typed dicts for speed (kuitti/receipts/schema.py), but their error still names
    the row type as it did when they were models, like the models' errors around them."""
    [error] = errors_of(mutated(change))
    assert error == {"error": "invalid_type", "decription": expected}


def test_full_card_number_is_never_echoed() -> None:
    doc = mutated(lambda d: d["payments"][0]["attributes"].update(maskedPAN="4153011234561234"))
    assert "4153011234561234" not in orjson.dumps(errors_of(doc)).decode()


def test_every_failure_is_reported_at_once() -> None:
    doc = receipt_doc()
    doc.pop("receiptNumber")
    doc["currencyISOCode"] = "XXY"
    doc["products"][0]["unitPriceIncVAT"] = "5"
    doc["products"][1]["vats"][0]["VATRate"] = "abc"
    paths = [e["decription"].split(":")[0] for e in errors_of(doc)]
    assert sorted(paths) == sorted(
        [
            "receiptNumber",
            "currencyISOCode",
            "products[0].unitPriceIncVAT",
            "products[1].vats[0].VATRate",
        ]
    )


def test_unknown_keys_are_kept_not_rejected() -> None:
    doc = receipt_doc(extraTopLevel={"a": 1})
    doc["merchant"]["branch"]["address"]["floor"] = 3
    request = parse_receipt_request(orjson.dumps(doc), attachments_enabled=False)
    assert request.document["extraTopLevel"] == {"a": 1}
    assert request.document["merchant"]["branch"]["address"]["floor"] == 3


def test_the_published_schema_allows_unknown_keys() -> None:
    schema = Receipt.model_json_schema()
    parts = [schema, *schema["$defs"].values()]
    models = [part for part in parts if part.get("type") == "object" and "properties" in part]
    assert len(models) > 20
    assert all(part.get("additionalProperties") is True for part in models)


class TestArithmetic:
    def test_totals_must_add_up(self) -> None:
        doc = mutated(lambda d: d.update(totalVATAmount=d["totalVATAmount"] + 1))
        codes = {(e["error"], e["decription"].split(":")[0]) for e in errors_of(doc)}
        assert codes == {
            ("inconsistent_totals", "totalPriceIncVAT"),
            ("inconsistent_totals", "totalVATAmount"),
        }

    def test_vat_rows_sum_to_totals(self) -> None:
        def change(d: dict[str, Any]) -> None:
            d["vats"][0]["totalAmountExcVAT"] -= 1
            d["vats"][0]["totalVATAmount"] += 1

        paths = {e["decription"].split(":")[0] for e in errors_of(mutated(change))}
        assert paths == {"totalVATAmount", "totalPriceExcVAT"}

    def test_vat_row_inc_is_exc_plus_vat(self) -> None:
        # Two rows off by one in opposite directions: every sum still holds, each row does not.
        doc = receipt_doc(many_rows(3))
        doc["vats"][0]["totalAmountIncVAT"] += 1
        doc["vats"][1]["totalAmountIncVAT"] -= 1
        paths = {e["decription"].split(":")[0] for e in errors_of(doc)}
        assert paths == {"vats[0].totalAmountIncVAT", "vats[1].totalAmountIncVAT"}

    def test_product_vat_parts_sum_to_row(self) -> None:
        doc = mutated(lambda d: d["products"][1].update(totalAmountIncVAT=1))
        assert only_error(doc) == ("inconsistent_totals", "products[1].totalAmountIncVAT")

    def test_product_vat_part_inc_is_exc_plus_vat(self) -> None:
        def change(d: dict[str, Any]) -> None:
            part = d["products"][0]["vats"][0]
            part["VATAmount"] += 1

        assert only_error(mutated(change)) == (
            "inconsistent_totals",
            "products[0].vats[0].totalAmountIncVAT",
        )

    def test_purchase_payments_sum_to_total(self) -> None:
        doc = receipt_doc()
        doc["payments"] = [card_payment(doc["totalPriceIncVAT"] - 100), card_payment(99)]
        assert only_error(doc) == ("inconsistent_totals", "payments")

    def test_purchase_is_the_default_type(self) -> None:
        doc = receipt_doc(payments=[card_payment(1)])
        del doc["type"]
        assert only_error(doc) == ("inconsistent_totals", "payments")

    def test_split_payment_that_adds_up(self) -> None:
        doc = receipt_doc()
        total = doc["totalPriceIncVAT"]
        doc["payments"] = [card_payment(total - 100), {"type": "CASH", "amount": 100}]
        parse_receipt_request(orjson.dumps(doc), attachments_enabled=False)

    def test_attachments_need_the_premium_feature(self) -> None:
        doc = receipt_doc(attachments=[attachment()])
        assert only_error(doc) == ("attachments_not_enabled", "attachments")
        parse_receipt_request(orjson.dumps(doc), attachments_enabled=True)


def test_big_integers_are_refused_where_they_are() -> None:
    """An integer outside the signed 64-bit range could not be stored as posted."""
    doc = receipt_doc()
    raw = orjson.dumps(doc).replace(
        f'"totalVATAmount":{doc["totalVATAmount"]}'.encode(), b'"totalVATAmount":' + b"9" * 40
    )
    with pytest.raises(InvalidRequest) as caught:
        parse_receipt_request(raw, attachments_enabled=False)
    details = [e.as_json() for e in caught.value.details()]
    assert {
        "error": "invalid_value",
        "decription": "totalVATAmount: integer outside the signed 64-bit range.",
    } in details


VISA = "4111111111111111"  # a Luhn-valid test number in the Visa range


class TestFullCardNumbers:
    """Full card numbers outside maskedPAN: refused where they are unmistakable, accepted where a
    run of digits is as often something else (figures in bench/pan_false_positives.py)."""

    @pytest.mark.parametrize(
        ("extra", "path"),
        [
            ({"freeText": "Kortti 4111 1111 1111 1111 hyväksytty"}, "freeText"),
            ({"freeText": "4111-1111-1111-1111"}, "freeText"),
            ({"notes": {"printed": "3782 822463 10005"}}, "notes.printed"),
            ({"cardNumber": VISA}, "cardNumber"),
            ({"customer": {"PAN": int(VISA)}}, "customer.PAN"),
        ],
    )
    def test_refused(self, extra: dict[str, Any], path: str) -> None:
        errors = errors_of(receipt_doc(**extra))
        assert [e["error"] for e in errors] == ["invalid_value"]
        description = errors[0]["decription"]
        assert description.startswith(f"{path}: looks like a full card number")
        assert "1111" not in description  # the number itself is never echoed

    @pytest.mark.parametrize(
        "extra",
        [
            {"freeText": f"Tilaus {VISA}"},  # bare digits: as often an order number
            {"orderNumber": "12345678901234567890"},
            {"ean": "6416000123457"},
            {"freeText": "Viite 1234 5612 3456 1234 5"},  # not Luhn-valid as a card
            {"loyalty": "6016000011112222"},
        ],
    )
    def test_accepted(self, extra: dict[str, Any]) -> None:
        parse_receipt_request(orjson.dumps(receipt_doc(**extra)), attachments_enabled=False)

    @pytest.mark.parametrize(
        "written",
        [
            r"Kortti 4111\u00201111\u00201111\u00201111",  # escaped spaces
            r"Kortti \u0034\u0031\u0031\u0031 1111 1111 1111",  # escaped digits
            "Kortti 4\u0661\u0661\u0661 \u0661\u0661\u0661\u0661 "
            "\u0661\u0661\u0661\u0661 \u0661\u0661\u0661\u0661",  # Arabic-Indic digits, as UTF-8
        ],
    )
    def test_refused_however_the_json_spells_it(self, written: str) -> None:
        """The body is scanned for runs of digits before the document is walked; a number the
        scan cannot see as written (escapes, digits beyond ASCII) must still be found."""
        body = orjson.dumps(receipt_doc(freeText="@")).replace(
            b'"@"', b'"' + written.encode() + b'"'
        )
        with pytest.raises(InvalidRequest) as caught:
            parse_receipt_request(body, attachments_enabled=False)
        details = [e.as_json() for e in caught.value.details()]
        assert [d["error"] for d in details] == ["invalid_value"]
        assert details[0]["decription"].startswith("freeText: looks like a full card number")

    def test_card_token_value_is_refused(self) -> None:
        body = {
            "attributes": {"tokens": [{"type": "CARD", "id": "card-1", "value": VISA}]},
            "receipt": receipt_doc(),
        }
        errors = errors_of(body)
        assert [e["error"] for e in errors] == ["invalid_token"]
        assert VISA not in errors[0]["decription"]
