"""Decimal text is checked by pydantic-core's regular expressions (Rust) instead of Python's
``re``; these tests prove the two accept exactly the same text: every code point as a digit of
the whole and of the fractional part, and random text over the characters that matter. A refused
value gets the message the Python check gave."""

from __future__ import annotations

import re
import sys

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from kuitti.errors import InvalidRequest
from kuitti.receipts.schema import DecimalText, RateText
from kuitti.receipts.validation import parse_receipt_request
from tests.factories import receipt_doc

# What the service accepted before the check moved to Rust, written as it was.
PYTHON_DECIMAL = re.compile(r"^-?\d{1,15}(\.\d{1,10})?$")
PYTHON_UNSIGNED = re.compile(r"^\d{1,15}(\.\d{1,10})?$")

CHECKS = [
    pytest.param(DecimalText, PYTHON_DECIMAL, id="decimal"),
    pytest.param(RateText, PYTHON_UNSIGNED, id="unsigned"),
]


def accepted_by_rust(kind: object, texts: list[str]) -> list[bool]:
    """One validation of the whole list; the indices of its errors are the refused texts."""
    adapter: TypeAdapter[list[str]] = TypeAdapter(list[kind])  # type: ignore[valid-type]
    refused: set[object] = set()
    try:
        adapter.validate_python(texts, strict=True)
    except ValidationError as exc:
        refused = {error["loc"][0] for error in exc.errors()}
    return [index not in refused for index in range(len(texts))]


def every_character() -> list[str]:
    # Lone surrogates never reach the model: the JSON edge refuses them.
    return [chr(c) for c in range(sys.maxunicode + 1) if not 0xD800 <= c <= 0xDFFF]


@pytest.mark.parametrize(
    ("kind", "python", "template"),
    [
        pytest.param(DecimalText, PYTHON_DECIMAL, "-{}", id="decimal, a digit of the whole"),
        pytest.param(DecimalText, PYTHON_DECIMAL, "1.{}", id="decimal, a digit of the fraction"),
        pytest.param(RateText, PYTHON_UNSIGNED, "{}", id="unsigned"),
    ],
)
def test_every_code_point_is_judged_alike(
    kind: object, python: re.Pattern[str], template: str
) -> None:
    texts = [template.format(char) for char in every_character()]
    rust = accepted_by_rust(kind, texts)
    differ = [t for t, ok in zip(texts, rust, strict=True) if ok != bool(python.match(t))]
    assert differ == []


EDGES = [
    "0",
    "24",
    "25.5",
    "-1",
    "-0.5",
    "1" * 15,
    "1" * 16,
    "1." + "1" * 10,
    "1." + "1" * 11,
    "1" * 15 + "." + "1" * 10,
    "14\n",
    "14\n\n",
    "14\r\n",
    "\n14",
    "1.\n",
    "\n",
    "",
    " 14",
    "14 ",
    "1,5",
    "1.5.5",
    ".5",
    "5.",
    "--1",
    "+1",
    "١٤",  # Arabic-Indic digits: Python's \d has always taken them
    "1e3",
]


@pytest.mark.parametrize(("kind", "python"), CHECKS)
def test_edges_are_judged_alike(kind: object, python: re.Pattern[str]) -> None:
    rust = accepted_by_rust(kind, EDGES)
    assert [(t, ok) for t, ok in zip(EDGES, rust, strict=True)] == [
        (t, bool(python.match(t))) for t in EDGES
    ]


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.text(alphabet="0123456789.-\n\r +e١𝟘", max_size=32))
def test_random_text_is_judged_alike(text: str) -> None:
    for kind, python in ((DecimalText, PYTHON_DECIMAL), (RateText, PYTHON_UNSIGNED)):
        assert accepted_by_rust(kind, [text]) == [bool(python.match(text))]


def refusal(change: dict[str, str]) -> list[dict[str, str]]:
    doc = receipt_doc()
    doc["products"][0].update(change)
    doc["products"][0]["vats"][0].update(VATRate=change.get("VATRate", "24"))
    with pytest.raises(InvalidRequest) as caught:
        parse_receipt_request(orjson.dumps(doc), attachments_enabled=False)
    return [e.as_json() for e in caught.value.details()]


def test_a_bad_decimal_keeps_its_message() -> None:
    assert refusal({"quantity": "1,5", "unitPriceIncVATDecimal": "x"}) == [
        {
            "error": "invalid_value",
            "decription": "products[0].quantity: must be a decimal number as text, e.g. 24 or "
            "25.5.",
        },
        {
            "error": "invalid_value",
            "decription": "products[0].unitPriceIncVATDecimal: must be a decimal number as "
            "text, e.g. 24 or 25.5.",
        },
    ]


def test_a_negative_rate_keeps_its_message() -> None:
    assert refusal({"VATRate": "-24"}) == [
        {
            "error": "invalid_value",
            "decription": "products[0].vats[0].VATRate: must be a non-negative decimal number as "
            "text, e.g. 24 or 25.5.",
        },
    ]


def test_too_long_is_still_reported_as_too_long() -> None:
    too_long = "1" * 31
    [error] = refusal({"quantity": too_long})
    assert error["decription"] == "products[0].quantity: string should have at most 30 characters."


def test_other_patterns_keep_their_own_message() -> None:
    doc = receipt_doc()
    doc["payments"] = [{"type": "gift card", "amount": doc["totalPriceIncVAT"]}]
    with pytest.raises(InvalidRequest) as caught:
        parse_receipt_request(orjson.dumps(doc), attachments_enabled=False)
    assert [e.as_json() for e in caught.value.details()] == [
        {
            "error": "invalid_value",
            "decription": "payments[0].type: string should match pattern '^[A-Z][A-Z0-9_]{0,39}$'.",
        }
    ]
