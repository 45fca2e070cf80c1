"""The quick way through validation answers exactly as the reference way (``fully=True``): the
same request (document, receipt, tokens) or the same list of errors, for every body of the test
corpus written every way a client might write it; and each edge the quick JSON reading cannot
vouch for is handed to the reference."""

from __future__ import annotations

import contextlib
import copy
import json
from collections.abc import Callable
from functools import partial
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, example, given, settings

from kuitti.errors import InvalidRequest
from kuitti.inputs import MAX_JSON_DEPTH, UNSURE, json_quickly, parse_json, parse_json_fully
from kuitti.receipts.validation import parse_receipt_request
from tests.factories import card_payment, many_rows, receipt_doc, token_body
from tests.posting.test_returns import ORIGINAL_NUMBER, ORIGINAL_TIME, return_doc
from tests.receipts.test_fuzz import json_values, mutated_bodies
from tests.receipts.test_validation import SHAPE_CASES, attachment, journey, verification
from tests.test_json_endpoints import values

SETTINGS = settings(
    max_examples=300,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)


def outcome(call: Callable[[], object]) -> str:
    """The answer, spelt out so that 1 and 1.0, or -0.0 and 0.0, differ (``==`` would not)."""
    try:
        return f"accepted {call()!r}"
    except InvalidRequest as exc:
        return f"refused {[e.as_json() for e in exc.details()]!r}"


def spellings(value: Any) -> list[bytes]:
    """One value as clients write it: compact, Python's default (spaces, ASCII escapes),
    indented with raw UTF-8 (lone surrogates kept as the bytes a careless encoder makes)."""
    written = [
        json.dumps(value).encode(),
        json.dumps(value, indent=2, ensure_ascii=False).encode("utf-8", "surrogatepass"),
    ]
    with contextlib.suppress(orjson.JSONEncodeError):  # a lone surrogate, an integer > 64 bits
        written.append(orjson.dumps(value))
    return written


def assert_same_answer(body: bytes) -> None:
    assert outcome(partial(parse_json, body)) == outcome(partial(parse_json_fully, body))
    for attachments in (False, True):
        quick = partial(parse_receipt_request, body, attachments_enabled=attachments)
        assert outcome(quick) == outcome(partial(quick, fully=True))


ORIGINAL = {"receiptNumber": ORIGINAL_NUMBER, "receiptTimeStamp": ORIGINAL_TIME, "branchId": "b1"}


def valid_documents() -> list[Any]:
    every_part = receipt_doc(
        many_rows(3),
        freeText="Kiitos käynnistä: tervetuloa uudelleen! 🍌",
        attachments=[attachment(validUntil="2026-02-01T00:00:00Z")],
        verifications=[verification()],
        customAttributes=[{"Asiakas": "12345"}],
        extraTopLevel={"a": [1, 2.5, None, True, {"b": "c:d"}]},
    )
    every_part["products"][0]["journey"] = journey()
    every_part["products"][1]["discounts"] = [{"amount": 0, "description": "Kampanja"}]
    every_part["products"][1]["categorization"] = {"product": "p", "sub": 12, "tags": ["x"]}
    split = receipt_doc(many_rows(2))
    split["payments"] = [
        card_payment(split["totalPriceIncVAT"] - 100),
        {"type": "GIFT_CARD", "amount": 100, "attributes": {"code": "L-1"}},
    ]
    return [
        receipt_doc(),
        receipt_doc(many_rows(60)),
        every_part,
        split,
        token_body(
            receipt_doc(),
            {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-1"},
            {"type": "EMAIL", "value": "Maija@Example.com"},
        ),
        return_doc(originalReceipt=ORIGINAL),
        return_doc(originalReceiptId="0b5bd0e8-3c7e-4f57-9a4e-3e1f1d2c7a10"),
    ]


def corpus() -> list[Any]:
    documents = valid_documents()
    for _, change, _, _ in SHAPE_CASES:
        doc = receipt_doc()
        change(doc)
        documents.append(doc)
    unbalanced = receipt_doc()
    unbalanced["totalVATAmount"] += 1
    unbalanced["products"][0]["vats"][0]["VATAmount"] += 1
    documents.append(unbalanced)
    documents.append(receipt_doc(freeText="Kortti 4111 1111 1111 1111 hyväksytty"))
    documents.append(receipt_doc(customer={"PAN": 4111111111111111}))
    documents.append(token_body(receipt_doc(), {"type": "CARD", "value": "4111111111111111"}))
    documents.append(return_doc(originalReceipt=ORIGINAL, originalReceiptId="not-an-id"))
    documents.append(receipt_doc(originalReceipt=ORIGINAL))  # only a return names an original
    return documents


@pytest.mark.parametrize("document", corpus(), ids=lambda _: "")
def test_corpus_gets_the_same_answer_both_ways(document: Any) -> None:
    for body in spellings(document):
        assert_same_answer(body)


@pytest.mark.parametrize("document", valid_documents(), ids=lambda _: "")
def test_valid_documents_take_the_quick_way(document: Any) -> None:
    """However a client writes a valid receipt, the quick reading serves it (else the speed
    would be lost without any test noticing)."""
    for body in spellings(document):
        assert json_quickly(body) is not UNSURE
        parse_receipt_request(body, attachments_enabled=True)


@SETTINGS
@given(body=mutated_bodies())
def test_mutated_receipts_get_the_same_answer_both_ways(body: Any) -> None:
    for written in spellings(body):
        assert_same_answer(written)


@SETTINGS
@given(value=values | json_values)
@example(value={"a": 1, "b": {"a": 1.0, "c": -0.0}})
@example(value=[1e308, 5e-324, 0.1, 2.5e-8, 123456789.123456789])
def test_any_json_gets_the_same_answer_both_ways(value: Any) -> None:
    for written in spellings(value) + spellings({"receipt": receipt_doc(), "attributes": value}):
        assert_same_answer(written)


def nested(depth: int) -> bytes:
    return b"[" * depth + b"]" * depth


def receipt_with(extra: bytes) -> bytes:
    """A valid receipt body with ``extra`` written into it as the value of a key ``x``."""
    return orjson.dumps(receipt_doc()).replace(
        b'"receiptNumber"', b'"x":' + extra + b',"receiptNumber"'
    )


def duplicated_deep() -> bytes:
    doc = receipt_doc()
    doc["payments"][0]["attributes"]["MID"] = "M-1"
    return orjson.dumps(doc).replace(b'"MID":"M-1"', b'"MID":"M-1","MID":"M-2"')


EDGES: list[tuple[str, bytes, str | None]] = [
    # (what, body, the error the reference gives, or None when it accepts)
    ("duplicated key at the top", receipt_with(b'1,"x":2'), "invalid_value"),
    ("duplicated key deep in a payment", duplicated_deep(), "invalid_value"),
    ("duplicated key whose value holds colons", receipt_with(b'"a:b","x":"c"'), "invalid_value"),
    ("duplicated key spelt with an escape", receipt_with(b'1,"\\u0078":2'), "invalid_value"),
    ("key with an escaped colon", receipt_with(b'{"a\\u003ab":1}'), None),
    ("escapes spelling digits", receipt_with(b'"\\u0034\\u0031\\u0031\\u0031"'), None),
    ("escaped U+0000", receipt_with(b'"a\\u0000b"'), "invalid_value"),
    ("escaped U+0000 in a key", receipt_with(b'{"a\\u0000":1}'), "invalid_value"),
    ("lone high surrogate", receipt_with(b'"\\ud800"'), "invalid_value"),
    ("lone low surrogate in a key", receipt_with(b'{"\\uDFFF":1}'), "invalid_value"),
    ("surrogate pair", receipt_with(b'"\\ud83d\\ude00"'), None),
    ("largest 64-bit integer", receipt_with(str(2**63 - 1).encode()), None),
    ("smallest 64-bit integer", receipt_with(str(-(2**63)).encode()), None),
    ("integer just beyond 64 bits", receipt_with(str(2**63).encode()), "invalid_value"),
    ("integer beyond unsigned 64 bits", receipt_with(str(2**64).encode()), "invalid_value"),
    ("integer far beyond", receipt_with(b"9" * 40), "invalid_value"),
    ("19 digits in text", receipt_with(b'"1234567890123456789"'), None),
    ("NaN", receipt_with(b"NaN"), "malformed_json"),
    ("Infinity", receipt_with(b"-Infinity"), "malformed_json"),
    ("number too large for a float", receipt_with(b"1e400"), "invalid_value"),
    ("float just beyond the largest", receipt_with(b"1.7976931348623159e308"), "invalid_value"),
    (
        "floats hard to round",
        receipt_with(b"[9007199254740993.0,2.2250738585072011e-308,2.4703282292062328e-324]"),
        None,
    ),
    ("nesting at the limit", receipt_with(nested(MAX_JSON_DEPTH - 1)), None),
    ("nesting one deeper", receipt_with(nested(MAX_JSON_DEPTH)), "malformed_json"),
    ("nesting far deeper", receipt_with(nested(2000)), "malformed_json"),
    ("Latin-1 bytes", receipt_with('"Ruisleipä"'.encode("latin-1")), "malformed_json"),
    ("surrogate as UTF-8 bytes", receipt_with(b'"\xed\xa0\x80"'), "malformed_json"),
    ("UTF-16", json.dumps(receipt_doc()).encode("utf-16"), "malformed_json"),
    ("byte order mark", b"\xef\xbb\xbf" + orjson.dumps(receipt_doc()), "malformed_json"),
    ("raw U+0000", receipt_with(b'"a\x00b"'), "malformed_json"),
    ("trailing comma", orjson.dumps(receipt_doc())[:-1] + b",}", "malformed_json"),
    ("empty body", b"", "malformed_json"),
]


@pytest.mark.parametrize(("body", "error"), [e[1:] for e in EDGES], ids=[e[0] for e in EDGES])
def test_edges_get_the_same_answer_both_ways(body: bytes, error: str | None) -> None:
    assert_same_answer(body)
    answer = outcome(partial(parse_receipt_request, body, attachments_enabled=False))
    if error is None:
        assert answer.startswith("accepted")
    else:
        assert answer.startswith(f"refused [{{'error': '{error}'")


# Bodies the quick reading can serve: what makes them edges is looked after elsewhere (digits
# spelt as escapes, by the scan for card numbers), or is within the limits.
SERVED_QUICKLY = {
    "escapes spelling digits",
    "surrogate pair",
    "floats hard to round",
    "nesting at the limit",
}


@pytest.mark.parametrize(("what", "body"), [e[:2] for e in EDGES], ids=[e[0] for e in EDGES])
def test_edges_go_to_the_reference(what: str, body: bytes) -> None:
    assert (json_quickly(body) is UNSURE) is (what not in SERVED_QUICKLY)


def test_a_resent_body_hashes_as_the_posted_json() -> None:
    """The idempotency hash comes from the request already parsed, and it covers the tokens."""
    doc = receipt_doc()
    plain = parse_receipt_request(orjson.dumps(doc), attachments_enabled=False)
    spaced = parse_receipt_request(json.dumps(doc, indent=1).encode(), attachments_enabled=False)
    assert plain.body_hash == spaced.body_hash == plain.document_hash
    with_token = token_body(copy.deepcopy(doc), {"type": "EMAIL", "value": "maija@example.com"})
    other_token = token_body(copy.deepcopy(doc), {"type": "EMAIL", "value": "matti@example.com"})
    first = parse_receipt_request(orjson.dumps(with_token), attachments_enabled=False)
    second = parse_receipt_request(orjson.dumps(other_token), attachments_enabled=False)
    assert first.document_hash == second.document_hash == plain.document_hash
    assert first.body_hash != second.body_hash
