"""msgspec against Pydantic on the same receipt documents: what reading and checking a document
costs each way (the write-path issue's "compare msgspec with Pydantic on the same documents").

The documents are ``bench/ingest.py``'s: 60 rows, three VAT rates, a CARD payment with the full
set of terminal attributes. kuitti reads a body with orjson, then Pydantic's ``Receipt``
(``kuitti/receipts/schema.py``). The msgspec side is a mirror of the parts these documents use
(merchant, products and their VATs, receipt VATs, card and cash payments), with the same
length limits, integer bounds and decimal patterns; it is not the whole schema, and none of the
checks ``schema.py`` makes in Python (date-times, currencies, masked card numbers, the payment
kinds' union, single-pair custom attributes). So its figures are a lower bound of what a full
mirror would cost. The decimal patterns run as Python ``re`` on each value in msgspec, as Rust
regular expressions in Pydantic; the last line times them alone, over the same values.

kuitti's own ``Receipt`` has Pydantic check everything but the rows, which ``schema.plain_rows``
(msgspec, its patterns in one match) vouches for; two lines time the rows each way.

Each figure is the best of ``--repeat`` passes of this process's CPU over the documents.

    .venv/bin/python bench/validation_msgspec.py [--bodies 200] [--repeat 7]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any, Literal

import msgspec
import orjson
from msgspec import Meta, Struct
from pydantic import TypeAdapter

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ingest import realistic_receipt  # noqa: E402  (bench/ingest.py)
from validation import cpu_ms  # noqa: E402  (bench/validation.py)

from kuitti.receipts import schema  # noqa: E402
from kuitti.receipts.schema import (  # noqa: E402
    LONG,
    MAX_ITEMS,
    MAX_ROWS,
    SHORT,
    Receipt,
    plain_rows,
)

# What schema.DECIMAL_PATTERN accepts, written for Python's re (its comment explains the match).
DECIMAL = r"^-?\d{1,15}(?:\.\d{1,10})?$"
UNSIGNED_DECIMAL = r"^\d{1,15}(?:\.\d{1,10})?$"


# The mirror: the parts the bench's documents use, limits and patterns as in schema.py.
Text = Annotated[str, Meta(max_length=SHORT)]
LongText = Annotated[str, Meta(max_length=LONG)]
DecimalText = Annotated[str, Meta(max_length=30, pattern=DECIMAL)]
RateText = Annotated[str, Meta(max_length=30, pattern=UNSIGNED_DECIMAL)]
Amount = Annotated[int, Meta(ge=-(10**15), le=10**15)]


class Address(Struct, frozen=True):
    streetAddress: Text
    city: Text
    zipCode: Text
    country: Text


class Branch(Struct, frozen=True):
    id: Text
    posId: Text
    name: Text
    address: Address
    subName: Text | None = None
    email: Text | None = None
    phone: Text | None = None
    websiteURL: Text | None = None


class Merchant(Struct, frozen=True):
    name: Text
    companyID: Text
    branch: Branch | None = None


class ProductVat(Struct, frozen=True):
    VATRate: RateText
    VATAmount: Amount
    totalAmountExcVAT: Amount
    totalAmountIncVAT: Amount


class Product(Struct, frozen=True):
    name: Text
    quantity: DecimalText
    quantityCode: Text
    unitPriceIncVAT: Amount
    totalAmountExcVAT: Amount
    totalAmountIncVAT: Amount
    vats: Annotated[list[ProductVat], Meta(min_length=1, max_length=MAX_ITEMS)]
    EANCode: Text | None = None
    productId: Text | None = None
    freeText: LongText | None = None
    unitPriceIncVATDecimal: DecimalText | None = None


class ReceiptVat(Struct, frozen=True):
    VATRate: RateText
    totalVATAmount: Amount
    totalAmountExcVAT: Amount
    totalAmountIncVAT: Amount
    VATCode: Text | None = None


# The card attributes as the Pydantic model lists them, each a short text unless named here (the
# checks schema.py makes in Python on three of them are left out, as said above).
_CARD_ATTRIBUTE_TYPES: dict[str, Any] = {
    "transactionRawText": LongText,
    "preAuthorizedAmount": Amount,
}
CardAttributes = msgspec.defstruct(
    "CardAttributes",
    [
        (name, _CARD_ATTRIBUTE_TYPES.get(name, Text) | None, None)
        for name in schema.CardAttributes.model_fields
    ],
    frozen=True,
)


class CardPayment(Struct, frozen=True, tag_field="type", tag="CARD"):
    amount: Amount
    attributes: CardAttributes | None = None  # type: ignore[valid-type]


class CashPayment(Struct, frozen=True, tag_field="type", tag="CASH"):
    amount: Amount


class MirroredReceipt(Struct, frozen=True):
    merchant: Merchant
    products: Annotated[list[Product], Meta(min_length=1, max_length=MAX_ROWS)]
    vats: Annotated[list[ReceiptVat], Meta(min_length=1, max_length=MAX_ITEMS)]
    receiptNumber: Text
    receiptTimeStamp: Text
    currencyISOCode: Text
    totalVATAmount: Amount
    totalPriceExcVAT: Amount
    totalPriceIncVAT: Amount
    type: Literal["PURCHASE", "RETURN", "PURCHASE_AND_RETURN"] | None = None
    freeText: LongText | None = None
    payments: Annotated[list[CardPayment | CashPayment], Meta(max_length=MAX_ITEMS)] | None = None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bodies", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(20260115)
    bodies = [json.dumps(realistic_receipt(rng, i, 60)).encode() for i in range(args.bodies)]
    documents = [orjson.loads(body) for body in bodies]
    decode = msgspec.json.Decoder(MirroredReceipt).decode
    rows = TypeAdapter(list[schema.Product]).validate_python
    for body in bodies:  # the mirror takes what the schema takes
        Receipt.model_validate_json(body)
        decode(body)
    bad = orjson.loads(bodies[0])
    bad["products"][0]["quantity"] = "1,5"  # a decimal comma: both must refuse it
    for refuses in (Receipt.model_validate, lambda d: msgspec.convert(d, MirroredReceipt)):
        try:
            refuses(bad)
        except (ValueError, msgspec.ValidationError):
            continue
        raise SystemExit("a reader took a decimal comma: the comparison would be unfair")
    decimals = [_decimal_values(document) for document in documents]

    print(
        f"{len(bodies)} documents of 60 rows, {sum(map(len, bodies)) // len(bodies)} bytes on "
        f"average; best of {args.repeat}; load average {os.getloadavg()[0]:.2f}"
    )
    steps: list[tuple[str, Callable[[Any], object], Sequence[Any]]] = [
        ("orjson.loads (kuitti's first step)", orjson.loads, bodies),
        ("kuitti's Receipt.model_validate(parsed)", Receipt.model_validate, documents),
        ("  its rows by Pydantic, list[Product]", lambda d: rows(d["products"]), documents),
        ("  its rows by msgspec, plain_rows", lambda d: plain_rows(d["products"]), documents),
        ("Pydantic Receipt.model_validate_json(bytes)", Receipt.model_validate_json, bodies),
        ("msgspec decode(bytes)", decode, bodies),
        ("msgspec convert(parsed)", lambda d: msgspec.convert(d, MirroredReceipt), documents),
        ("the decimal patterns alone, by re.search", _match_all, decimals),
    ]  # fmt: skip
    for label, step, inputs in steps:
        print(f"  {label:<46} {cpu_ms(step, inputs, args.repeat):.3f} ms")


_PATTERNS = {"quantity": re.compile(DECIMAL), "VATRate": re.compile(UNSIGNED_DECIMAL)}


def _decimal_values(document: dict[str, Any]) -> list[tuple[re.Pattern[str], str]]:
    """Every value of the document that the mirror checks with a pattern, with its pattern."""
    values = []
    for product in document["products"]:
        values.append((_PATTERNS["quantity"], product["quantity"]))
        values.extend((_PATTERNS["VATRate"], vat["VATRate"]) for vat in product["vats"])
    values.extend((_PATTERNS["VATRate"], vat["VATRate"]) for vat in document["vats"])
    return values


def _match_all(values: list[tuple[re.Pattern[str], str]]) -> None:
    for pattern, value in values:
        pattern.search(value)


if __name__ == "__main__":
    main()
