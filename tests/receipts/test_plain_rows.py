"""``schema.plain_rows`` (msgspec) vouches for a receipt's rows so that Pydantic need not build
them. It may refuse more than ``list[Product]`` does, never less, and what it vouches for must be
the rows Pydantic would have given, unknown keys aside. These tests hold it to that: its decimal
patterns over every code point, against the patterns test_schema_patterns.py proves equal to
Pydantic's; random rows, good and bad, through both; and the rows a receipt usually has, which it
must take (or the quick way would quietly stop being taken)."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import TypeAdapter, ValidationError

from kuitti.receipts import schema
from kuitti.receipts.schema import Discount, Product, ProductVat, Receipt, plain_rows
from kuitti.receipts.validation import parse_receipt_request
from tests.factories import product_row, receipt_doc
from tests.receipts.test_schema_patterns import (
    EDGES,
    PYTHON_DECIMAL,
    PYTHON_UNSIGNED,
    every_character,
)

ROWS: TypeAdapter[list[Product]] = TypeAdapter(list[Product])


def pydantic_rows(rows: object) -> list[dict[str, Any]] | None:
    """What ``Receipt`` checks rows with when msgspec does not vouch: the rows, or None."""
    try:
        return ROWS.validate_python(rows, strict=True)  # type: ignore[return-value]
    except ValidationError:
        return None


def declared(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The rows as Pydantic gives them: the keys ``Product`` and ``ProductVat`` declare."""
    return [
        {k: v for k, v in row.items() if k in Product.__annotations__}
        | {
            "vats": [
                {k: v for k, v in vat.items() if k in ProductVat.__annotations__}
                for vat in row["vats"]
            ]
        }
        for row in rows
    ]


def test_the_mirror_names_every_key_of_a_row() -> None:
    # msgspec ignores a key it does not know, so a key missing here would go unchecked.
    assert set(schema._PlainRow.__struct_fields__) == set(Product.__annotations__)
    assert set(schema._PlainVat.__struct_fields__) == set(ProductVat.__annotations__)


@pytest.mark.parametrize(
    ("joined", "python", "template"),
    [
        pytest.param(schema._DECIMALS, PYTHON_DECIMAL, "-{}", id="decimal, whole"),
        pytest.param(schema._DECIMALS, PYTHON_DECIMAL, "1.{}", id="decimal, fraction"),
        pytest.param(schema._UNSIGNED_DECIMALS, PYTHON_UNSIGNED, "{}", id="unsigned"),
    ],
)
def test_one_value_is_judged_as_pydantic_judges_it(
    joined: re.Pattern[str], python: re.Pattern[str], template: str
) -> None:
    texts = [template.format(c) for c in every_character()] + EDGES
    differ = [
        t
        for t in texts
        if "," not in t and schema._all_match(joined, [t]) != bool(python.fullmatch(t))
    ]
    assert differ == []


@pytest.mark.parametrize(
    "values",
    [
        ["1,5"],  # one value with a comma would read as two good ones
        ["1", "1,5"],
        ["1,", "5"],
        [",1"],
        ["1", ""],
        ["", "1"],
        ["1\n", "2\n"],  # no value may end with a line break
        ["1", "2\n"],
        ["٢", "1"],  # nor hold a digit other than ASCII's
    ],
)
def test_values_are_never_run_together(values: list[str]) -> None:
    one_by_one = all("," not in v and PYTHON_DECIMAL.fullmatch(v) for v in values)
    assert schema._all_match(schema._DECIMALS, values) == one_by_one


def test_the_usual_receipts_rows_are_taken_as_posted(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(Path(__file__).resolve().parents[2] / "bench")
    from ingest import realistic_receipt  # bench/ingest.py: the benchmark's documents

    documents = [realistic_receipt(random.Random(seed), seed, 0) for seed in range(20)]
    documents.append(receipt_doc())
    for document in documents:
        rows = orjson.loads(json.dumps(document))["products"]
        assert plain_rows(rows)
        assert Receipt.model_validate(document).products is document["products"]


def test_a_row_with_a_nested_object_is_left_to_pydantic() -> None:
    discount = {"amount": -50, "description": "Kanta-asiakasetu", "percentage": "10"}
    document = receipt_doc([product_row(discounts=[discount], categorization=None)])
    assert not plain_rows(document["products"])
    request = parse_receipt_request(orjson.dumps(document), attachments_enabled=False)
    [row] = request.receipt.products
    assert row.get("discounts") == [Discount.model_validate(discount)]


def test_unknown_keys_are_kept_and_unchecked() -> None:
    rows = [product_row(sku={"any": ["thing"]}, vats=[{**product_row()["vats"][0], "x": 1}])]
    assert plain_rows(rows)
    assert pydantic_rows(rows) == declared(rows)


# Each key of a row and of its VAT part set, one at a time, to each of these values.
EDGE_VALUES: list[Any] = [
    *EDGES,
    *(f"{e}0" for e in EDGES),
    "x" * 500,
    "x" * 501,
    "y" * 20_000,
    "y" * 20_001,
    10**15,
    10**15 + 1,
    -(10**15),
    -(10**15) - 1,
    2**64,
    0,
    1.0,
    0.5,
    True,
    False,
    None,
    [],
    [None],
    {},
    {"main": "x", "product": "y"},
    [{"amount": 1, "description": "x"}],
    [{"k": "v"}],
    {"type": "BUS", "origin": {"name": "a"}, "destination": {"name": "b"}},
]


@pytest.mark.parametrize("vat", [False, True], ids=["row", "VAT part"])
def test_every_key_set_to_every_edge_value(vat: bool) -> None:
    keys = ProductVat.__annotations__ if vat else Product.__annotations__
    taken = 0
    for key in [*keys, "unknown"]:
        for value in [*EDGE_VALUES, ...]:  # ... stands for the key left out
            rows = [product_row(), product_row()]
            changed = rows[1]["vats"][0] if vat else rows[1]
            changed.pop(key, None) if value is ... else changed.update({key: value})
            if plain_rows(rows):
                taken += 1
                assert pydantic_rows(rows) == declared(rows), (key, value)
    assert taken > 50  # the check above was not vacuous


# Random rows: good ones, then a few keys of some changed to a value that is wrong, or right in
# a way one of the two checks might get wrong.
DIGITS = st.text(alphabet="0123456789", min_size=1, max_size=16)
GOOD_DECIMALS = st.builds(
    lambda sign, whole, fraction: sign + whole + fraction,
    st.sampled_from(["", "-"]),
    DIGITS,
    st.one_of(st.just(""), DIGITS.map(lambda d: "." + d[:11])),
)
GOOD_TEXTS = st.one_of(st.text(max_size=8), st.sampled_from(["", "x" * 500, "ä\u0301"]))
GOOD_AMOUNTS = st.one_of(
    st.integers(min_value=-(10**15), max_value=10**15), st.sampled_from([10**15, -(10**15)])
)
ANY_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=4),
    lambda inner: (
        st.lists(inner, max_size=2) | st.dictionaries(st.text(max_size=4), inner, max_size=2)
    ),
    max_leaves=4,
)
TRICKY = st.one_of(
    ANY_JSON,
    GOOD_DECIMALS,
    st.sampled_from(["1,5", "1.", "+1", "1\n", "1\n\n", "\n1", "1" * 16, "-", "", "x" * 501]),
    st.sampled_from(["٢", "２", "१४", "1.٢", "𝟘", "-١"]),
    st.sampled_from([10**15 + 1, -(10**15) - 1, 2**64, 1.0, True, False, [], {}, "1"]),
    st.sampled_from(["y" * 20_000, "y" * 20_001]),
)
GOOD_VAT = st.fixed_dictionaries(
    {
        "VATRate": GOOD_DECIMALS.map(lambda d: d.lstrip("-")),
        "VATAmount": GOOD_AMOUNTS,
        "totalAmountExcVAT": GOOD_AMOUNTS,
        "totalAmountIncVAT": GOOD_AMOUNTS,
    },
    optional={"VATCode": ANY_JSON},
)
GOOD_ROW = st.fixed_dictionaries(
    {
        "name": GOOD_TEXTS,
        "quantity": GOOD_DECIMALS,
        "quantityCode": GOOD_TEXTS,
        "unitPriceIncVAT": GOOD_AMOUNTS,
        "totalAmountExcVAT": GOOD_AMOUNTS,
        "totalAmountIncVAT": GOOD_AMOUNTS,
        "vats": st.lists(GOOD_VAT, min_size=1, max_size=3),
    },
    optional={
        "EANCode": st.none() | GOOD_TEXTS,
        "productId": st.none() | GOOD_TEXTS,
        "freeText": st.none() | GOOD_TEXTS,
        "unitPriceIncVATDecimal": st.none() | GOOD_DECIMALS,
        "categorization": st.none(),
        "discounts": st.none(),
        "customAttributes": st.none(),
        "journey": st.none(),
        "unknown": ANY_JSON,
    },
)
ROW_KEYS = sorted(Product.__annotations__)
VAT_KEYS = sorted(ProductVat.__annotations__)


@st.composite
def rows_some_changed(draw: st.DrawFn) -> list[Any]:
    rows: list[Any] = draw(st.lists(GOOD_ROW, min_size=1, max_size=3))
    for _ in range(draw(st.integers(min_value=0, max_value=2))):
        row = draw(st.sampled_from(rows))
        if draw(st.booleans()) and isinstance(row.get("vats"), list) and row["vats"]:
            row, key = draw(st.sampled_from(row["vats"])), draw(st.sampled_from(VAT_KEYS))
        else:
            key = draw(st.sampled_from(ROW_KEYS))
        if draw(st.integers(min_value=0, max_value=5)) == 0:
            row.pop(key, None)
        else:
            row[key] = draw(TRICKY)
    return rows


@settings(max_examples=2000, deadline=None, derandomize=True)
@given(st.one_of(rows_some_changed(), rows_some_changed(), rows_some_changed(), ANY_JSON))
def test_what_msgspec_takes_pydantic_takes_alike(rows: Any) -> None:
    if plain_rows(rows):
        assert pydantic_rows(rows) == declared(rows)


@settings(max_examples=1000, deadline=None, derandomize=True)
@given(
    st.lists(
        st.builds(
            lambda name, quantity, rate, price: product_row(
                name, unit_price=price, quantity=quantity, rate=rate
            ),
            st.text(max_size=500),
            st.integers(min_value=-5, max_value=5),
            st.sampled_from(["0", "10", "14", "25.5", "24"]),
            st.integers(min_value=0, max_value=10**9),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_good_plain_rows_take_the_quick_way(rows: list[dict[str, Any]]) -> None:
    assert pydantic_rows(rows) is not None
    assert plain_rows(rows)
