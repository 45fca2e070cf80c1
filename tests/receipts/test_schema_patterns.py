"""Decimal text is checked by pydantic-core's regular expressions (Rust) from patterns published
in the OpenAPI document; these tests prove they accept exactly the reference below (ASCII digits,
nothing after the last one): every code point as a digit of the whole and of the fractional part,
and random text over the characters that matter. The patterns are portable: a JSON Schema
validator (ECMA-262) reads them alike. A refused value gets our message."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import uuid
from typing import Annotated, Any

import httpx
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import Field, TypeAdapter, ValidationError

from kuitti.errors import InvalidRequest
from kuitti.receipts.schema import (
    DECIMAL_PATTERN,
    UNSIGNED_DECIMAL_PATTERN,
    DecimalText,
    RateText,
)
from kuitti.receipts.validation import parse_receipt_request
from kuitti.services import Services
from tests.factories import auth, make_partner, receipt_doc

# What the service takes as decimal text (docs/api.md), in Python: ``fullmatch``, so no final
# line break slips by.
PYTHON_DECIMAL = re.compile(r"-?[0-9]{1,15}(\.[0-9]{1,10})?")
PYTHON_UNSIGNED = re.compile(r"[0-9]{1,15}(\.[0-9]{1,10})?")

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
    differ = [t for t, ok in zip(texts, rust, strict=True) if ok != bool(python.fullmatch(t))]
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
    "١٤",  # Arabic-Indic digits
    "٢",
    "２",  # a fullwidth digit
    "१४",  # Devanagari digits
    "2\n",
    "𝟘",
    "1e3",
]


@pytest.mark.parametrize(("kind", "python"), CHECKS)
def test_edges_are_judged_alike(kind: object, python: re.Pattern[str]) -> None:
    rust = accepted_by_rust(kind, EDGES)
    assert [(t, ok) for t, ok in zip(EDGES, rust, strict=True)] == [
        (t, bool(python.fullmatch(t))) for t in EDGES
    ]


@settings(max_examples=500, deadline=None, derandomize=True)
@given(st.text(alphabet="0123456789.-\n\r +e١２𝟘", max_size=32))
def test_random_text_is_judged_alike(text: str) -> None:
    for kind, python in ((DecimalText, PYTHON_DECIMAL), (RateText, PYTHON_UNSIGNED)):
        assert accepted_by_rust(kind, [text]) == [bool(python.fullmatch(text))]


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


def published_patterns(node: object) -> set[str]:
    if isinstance(node, dict):
        found = {node["pattern"]} if isinstance(node.get("pattern"), str) else set()
        return found.union(*(published_patterns(value) for value in node.values()))
    if isinstance(node, list):
        return set().union(*(published_patterns(value) for value in node))
    return set()


# Each pattern compiled as a JSON Schema validator compiles it (ECMA-262, with the ``u`` flag),
# then asked about every text: the answers, one line of JSON per pattern.
JUDGE_IN_JAVASCRIPT = """
const {patterns, texts} = JSON.parse(require("fs").readFileSync(0, "utf8"));
for (const pattern of patterns) {
  const re = new RegExp(pattern, "u");
  console.log(JSON.stringify(texts.map((text) => re.test(text))));
}
"""


@pytest.mark.skipif(shutil.which("node") is None, reason="needs Node.js, a JavaScript engine")
def test_the_published_patterns_mean_the_same_in_javascript(client: httpx.Client) -> None:
    patterns = sorted(published_patterns(client.get("/openapi.json").json()))
    assert DECIMAL_PATTERN in patterns
    assert UNSIGNED_DECIMAL_PATTERN in patterns
    texts = [*EDGES, "1.2", "٢.5", "-２"]
    judged = subprocess.run(
        ["node", "-e", JUDGE_IN_JAVASCRIPT],
        input=json.dumps({"patterns": patterns, "texts": texts}),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.splitlines()
    answers = dict(zip(patterns, (json.loads(line) for line in judged), strict=True))
    for pattern, python in (
        (DECIMAL_PATTERN, PYTHON_DECIMAL),
        (UNSIGNED_DECIMAL_PATTERN, PYTHON_UNSIGNED),
    ):
        assert answers[pattern] == [bool(python.fullmatch(t)) for t in texts]
    for pattern in patterns:  # and every pattern reads as the service's own engine reads it
        kind = Annotated[str, Field(pattern=pattern)]
        assert answers[pattern] == accepted_by_rust(kind, texts), pattern


@pytest.mark.parametrize("text", ["٢", "２", "१४", "2\n", "1.٥", "-٢"])
def test_digits_other_than_ascii_and_a_final_line_break_are_refused_in_a_post(
    client: httpx.Client, services: Services, text: str
) -> None:
    merchant = make_partner(services)
    doc = receipt_doc()
    doc["products"][0]["quantity"] = text
    doc["products"][0]["vats"][0]["VATRate"] = text.lstrip("-")
    answers = [
        client.post(url, json=doc, headers=auth(merchant.api_key))
        for url in ("/api/v1/receipts/validate", "/api/v1/receipts/")
    ]
    for answer in answers:
        assert answer.status_code == 400
        assert [e["decription"].split(":")[0] for e in answer.json()] == [
            "products[0].quantity",
            "products[0].vats[0].VATRate",
        ]


@pytest.mark.parametrize(
    ("change", "path"),
    [
        (
            lambda d: d["payments"][0]["attributes"].update(maskedPAN="415301******1234\n"),
            "payments[0].attributes.maskedPAN",
        ),
        (
            lambda d: d["products"][0].update(categorization={"main": "x", "sub": "١٤"}),
            "products[0].categorization.sub",
        ),
        (
            lambda d: d.update(type="RETURN", originalReceiptId=str(uuid.uuid4()) + "\n"),
            "originalReceiptId",
        ),
    ],
    ids=["maskedPAN", "categorization.sub", "originalReceiptId"],
)
def test_other_digit_rules_take_ascii_and_nothing_after(
    client: httpx.Client, services: Services, change: Any, path: str
) -> None:
    merchant = make_partner(services)
    doc = receipt_doc()
    change(doc)
    answer = client.post("/api/v1/receipts/validate", json=doc, headers=auth(merchant.api_key))
    assert answer.status_code == 400
    body = answer.json()
    assert path in [
        e["decription"].split(":")[0] for e in (body if isinstance(body, list) else [body])
    ]
