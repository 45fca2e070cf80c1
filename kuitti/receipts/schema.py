"""The receipt JSON document, field for field as the interface's tables give it.

Field names are the interface's own spellings (``EANCode``, ``VATRate``, ``MID``…), so a reader can
hold this module beside the tables. Unknown keys are allowed: the stored document is always the
one posted, unknown keys included, and these models only check it, so they do not copy unknown
keys (``extra="ignore"``; keeping them on every model cost a sixth of validation). Types are
strict: a string where the table says Integer is ``invalid_type``, never coerced.

Why one long module: it is the interface's tables written as code, one class per table in the
tables' order; splitting it would make it harder to hold beside them.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from typing import Annotated, Literal, NotRequired

import msgspec
from babel.numbers import list_currencies
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    Tag,
    ValidatorFunctionWrapHandler,
    field_validator,
    with_config,
)
from typing_extensions import TypedDict

from kuitti.inputs import parse_moment

ISO_4217_CODES = frozenset(list_currencies())

# Decimal text is on every row, so pydantic-core checks it with its own regular expression, in
# Rust: a Python check per value would be a quarter of the model's cost. The patterns are portable
# (ECMA-262, Rust, Python): ASCII digits only, and ``$`` is the end of the text, never before a
# final line break (in Rust and ECMA-262; Python code uses ``fullmatch``).
DECIMAL_PATTERN = r"^-?[0-9]{1,15}(?:\.[0-9]{1,10})?$"
UNSIGNED_DECIMAL_PATTERN = r"^[0-9]{1,15}(?:\.[0-9]{1,10})?$"
PATTERN_MESSAGES = {
    DECIMAL_PATTERN: "must be a decimal number as text, e.g. 24 or 25.5",
    UNSIGNED_DECIMAL_PATTERN: "must be a non-negative decimal number as text, e.g. 24 or 25.5",
}
"""Our message for a value that does not match one of these patterns (pydantic's own would echo
the pattern)."""
MASK_CHARACTERS = "*Xx#"
MASKED_PAN_RE = re.compile(r"[0-9*Xx# -]{4,26}")

# Limits that keep one request's work bounded; the body-size limit caps the rest.
MAX_ROWS = 5000
MAX_ITEMS = 200
SHORT = 500
LONG = 20_000


def _check_datetime(value: str) -> str:
    parse_moment(value)
    return value


def _check_currency(value: str) -> str:
    if value not in ISO_4217_CODES:
        raise ValueError("must be an ISO 4217 currency code such as EUR")
    return value


def _check_masked_pan(value: str) -> str:
    if not MASKED_PAN_RE.fullmatch(value):
        raise ValueError("must be a masked card number: digits and mask characters * X x #")
    digits = [c for c in value if c.isdigit()]
    if not any(c in MASK_CHARACTERS for c in value) and len(digits) > 10:
        # Never accept (or echo) what looks like a full card number.
        raise ValueError("looks like a full card number; send it masked, e.g. 415301******1234")
    return value


DateTimeText = Annotated[str, AfterValidator(_check_datetime)]
CurrencyCode = Annotated[str, AfterValidator(_check_currency)]
DecimalText = Annotated[str, Field(max_length=30, pattern=DECIMAL_PATTERN)]
RateText = Annotated[str, Field(max_length=30, pattern=UNSIGNED_DECIMAL_PATTERN)]
MaskedPAN = Annotated[str, AfterValidator(_check_masked_pan)]
Text = Annotated[str, Field(max_length=SHORT)]
LongText = Annotated[str, Field(max_length=LONG)]
Amount = Annotated[int, Field(ge=-(10**15), le=10**15, description="Fractional unit (cents).")]


def _check_single_pair(value: dict[str, str]) -> dict[str, str]:
    if len(value) != 1:
        raise ValueError("each custom attribute is an object with exactly one key/value pair")
    return value


CustomAttribute = Annotated[
    dict[Annotated[str, Field(max_length=SHORT)], LongText],
    AfterValidator(_check_single_pair),
]
CustomAttributes = Annotated[
    list[CustomAttribute],
    Field(
        max_length=MAX_ITEMS,
        description="Key/value pairs shown on the receipt; each element is a single-pair object.",
    ),
]


class Document(BaseModel):
    """Base of every part of the document: strict types, unknown keys allowed (and published
    as allowed in the OpenAPI document), though not copied onto the model."""

    model_config = ConfigDict(
        extra="ignore", strict=True, frozen=True, json_schema_extra={"additionalProperties": True}
    )


class Address(Document):
    streetAddress: Text
    city: Text
    zipCode: Text
    country: Text


class Branch(Document):
    id: Text = Field(description="Unique branch identifier (for example cost centre number).")
    posId: Text = Field(description="Logical cash register id.")
    name: Text = Field(description="Branch name.")
    subName: Text | None = Field(None, description="Free-text slogan under the branch name.")
    email: Text | None = Field(None, description="Support e-mail of branch/company.")
    phone: Text | None = Field(None, description="Support phone of branch/company.")
    websiteURL: Text | None = None
    address: Address


class Merchant(Document):
    name: Text = Field(description="Company name.")
    companyID: Text = Field(description="Business id or VAT number.")
    branch: Branch | None = None


# The two row types are typed dicts, not models: a 60-row receipt builds 120 of them, and as
# models they cost the whole document's validation 60 % more, freeing included
# (bench/HISTORY.md). Pydantic checks them the same way, and
# ``row_type_at`` keeps the error a model gave for a row that is not an object. Read an optional
# key with ``.get``: a key that was not posted is not there.
_ROW = ConfigDict(extra="ignore", strict=True, json_schema_extra={"additionalProperties": True})
NULL_IF_ABSENT = Field(json_schema_extra={"default": None})
"""An optional key of a row: absent reads as null, as the OpenAPI document says."""


@with_config(_ROW)
class ProductVat(TypedDict):
    VATRate: Annotated[RateText, Field(description="Integer or decimal number as text.")]
    VATAmount: Amount
    totalAmountExcVAT: Amount
    totalAmountIncVAT: Amount


class Discount(Document):
    amount: Amount
    percentage: DecimalText | None = Field(None, description="Decimal percentage as text.")
    description: LongText = Field(description="Free-text reason.")


class Categorization(Document):
    main: Text | None = Field(None, description="Main category identifier.")
    product: Text = Field(description="Product category identifier.")
    sub: int | Annotated[str, Field(pattern=r"^[0-9]{1,18}$")] | None = Field(
        None, description="Sub category identifier: an integer, or a string of digits."
    )
    tags: Annotated[list[Text], Field(max_length=MAX_ITEMS)] | None = Field(
        None, description="Custom tags, e.g. marking inclusion in a stamp card offer."
    )


class JourneyLocation(Document):
    name: Text
    city: Text | None = None
    country: Text | None = None
    latitude: Text | None = None
    longitude: Text | None = None
    datetime: DateTimeText | None = Field(None, description="Departure or arrival time.")


class JourneyVehicle(Document):
    id: Text
    licensePlate: Text
    make: Text | None = None
    model: Text | None = None
    category: Literal["SEDAN", "HATCHBACK", "WAGON", "VAN", "MINIBUS", "SUV", "LUXURY"] | None = (
        None
    )
    powertrain: (
        Literal["PETROL", "DIESEL", "HYBRID", "PLUG_IN_HYBRID", "ELECTRIC", "HYDROGEN"] | None
    ) = None
    phoneNumber: Text | None = None


class JourneyDriver(Document):
    id: Text


class Journey(Document):
    type: Literal["TRAIN", "BUS", "TAXI", "FLIGHT", "FERRY"]
    id: Text | None = Field(None, description="Connection or flight number.")
    distance: Annotated[int | float, Field(ge=0)] | None = Field(None, description="Metres.")
    duration: Annotated[int | float, Field(ge=0)] | None = Field(None, description="Minutes.")
    CO2Emissions: Annotated[int, Field(ge=0)] | None = Field(None, description="Grams.")
    origin: JourneyLocation
    destination: JourneyLocation
    vehicle: JourneyVehicle | None = Field(None, description="Applicable for type=TAXI.")
    driver: JourneyDriver | None = Field(None, description="Applicable for type=TAXI.")
    pickupArrivedAt: DateTimeText | None = None


@with_config(_ROW)
class Product(TypedDict):
    name: Text
    EANCode: NotRequired[Annotated[Text | None, NULL_IF_ABSENT]]
    quantity: Annotated[
        DecimalText, Field(description="Quantity as a decimal number in text, e.g. 1 or 0.5.")
    ]
    productId: NotRequired[
        Annotated[Text | None, NULL_IF_ABSENT, Field(description="Merchant's internal product id.")]
    ]
    quantityCode: Annotated[Text, Field(description="Quantity code (unit), e.g. pcs, kg, l.")]
    freeText: NotRequired[Annotated[LongText | None, NULL_IF_ABSENT]]
    categorization: NotRequired[Annotated[Categorization | None, NULL_IF_ABSENT]]
    unitPriceIncVAT: Amount
    unitPriceIncVATDecimal: NotRequired[
        Annotated[
            DecimalText | None,
            NULL_IF_ABSENT,
            Field(description="Unit price in main currency unit; mainly for petrol receipts."),
        ]
    ]
    totalAmountExcVAT: Annotated[
        Amount, Field(description="Row total without VAT, after discounts.")
    ]
    totalAmountIncVAT: Annotated[Amount, Field(description="Row total with VAT, after discounts.")]
    vats: Annotated[
        list[ProductVat],
        Field(
            min_length=1,
            max_length=MAX_ITEMS,
            description="One object per VAT rate of the product.",
        ),
    ]
    discounts: NotRequired[
        Annotated[Annotated[list[Discount], Field(max_length=MAX_ITEMS)] | None, NULL_IF_ABSENT]
    ]
    customAttributes: NotRequired[Annotated[CustomAttributes | None, NULL_IF_ABSENT]]
    journey: NotRequired[Annotated[Journey | None, NULL_IF_ABSENT]]


# Rows the quick way: msgspec checks the plainest rows, which nearly every receipt has, in less
# than half the time Pydantic takes to build them as models (docs/performance.md, Ingest): the
# same keys, types and limits as ``Product`` and ``ProductVat``, and no row with a
# nested object (Pydantic would make models of those, which later code reads). It only vouches:
# when it refuses anything, Pydantic checks the rows again and writes the errors, so it may be
# stricter than ``Product``, never looser. tests/receipts/test_plain_rows.py holds it to that.
_PlainText = Annotated[str, msgspec.Meta(max_length=SHORT)]
_PlainLongText = Annotated[str, msgspec.Meta(max_length=LONG)]
_PlainAmount = Annotated[int, msgspec.Meta(ge=-(10**15), le=10**15)]


class _PlainVat(msgspec.Struct, gc=False):
    VATRate: str
    VATAmount: _PlainAmount
    totalAmountExcVAT: _PlainAmount
    totalAmountIncVAT: _PlainAmount


class _PlainRow(msgspec.Struct, gc=False):
    name: _PlainText
    quantity: str
    quantityCode: _PlainText
    unitPriceIncVAT: _PlainAmount
    totalAmountExcVAT: _PlainAmount
    totalAmountIncVAT: _PlainAmount
    vats: Annotated[list[_PlainVat], msgspec.Meta(min_length=1, max_length=MAX_ITEMS)]
    EANCode: _PlainText | None = None
    productId: _PlainText | None = None
    freeText: _PlainLongText | None = None
    unitPriceIncVATDecimal: str | None = None
    categorization: None = None
    discounts: None = None
    customAttributes: None = None
    journey: None = None


_PlainRows = Annotated[list[_PlainRow], msgspec.Meta(min_length=1, max_length=MAX_ROWS)]
# The decimal patterns as one ``fullmatch`` over all of a receipt's values joined by commas,
# which no value may hold.
_UNSIGNED_DECIMAL = r"[0-9]{1,15}(?:\.[0-9]{1,10})?"
_DECIMALS = re.compile(rf"(?:-?{_UNSIGNED_DECIMAL},)*-?{_UNSIGNED_DECIMAL}")
_UNSIGNED_DECIMALS = re.compile(rf"(?:{_UNSIGNED_DECIMAL},)*{_UNSIGNED_DECIMAL}")


def plain_rows(value: object) -> bool:
    """True when ``value`` is a list of rows that ``list[Product]`` takes as they are, none with
    a nested object; False when only Pydantic can tell."""
    if type(value) is not list:  # msgspec would take a tuple too
        return False
    try:
        rows = msgspec.convert(value, _PlainRows)
    except msgspec.ValidationError:
        return False
    decimals = [row.quantity for row in rows]
    decimals += [
        row.unitPriceIncVATDecimal for row in rows if row.unitPriceIncVATDecimal is not None
    ]
    rates = [vat.VATRate for row in rows for vat in row.vats]
    return _all_match(_DECIMALS, decimals) and _all_match(_UNSIGNED_DECIMALS, rates)


def _all_match(pattern: re.Pattern[str], values: list[str]) -> bool:
    joined = ",".join(values)
    return joined.count(",") == len(values) - 1 and pattern.fullmatch(joined) is not None


def row_type_at(loc: tuple[int | str, ...]) -> str | None:
    """The row type at ``loc`` in the document (``products[i]``, ``products[i].vats[j]``), if
    any: the error for a row that is not an object names it, as it did when rows were models."""
    match loc:
        case ("products", int()):
            return "Product"
        case ("products", int(), "vats", int()):
            return "ProductVat"
    return None


class ReceiptVat(Document):
    VATRate: RateText = Field(description="Integer or decimal as text.")
    totalVATAmount: Amount
    totalAmountExcVAT: Amount
    totalAmountIncVAT: Amount
    VATCode: Text | None = Field(None, description="VAT identifier.")


class CardAttributes(Document):
    """Card payment attributes; those used by card-linking are MID, timeStamp, maskedPAN,
    authorizationCode, referenceNumber and preAuthorizedAmount."""

    transactionType: Text | None = Field(None, description="E.g. PURCHASE.")
    currencyISOCode: CurrencyCode | None = None
    MID: Text | None = Field(None, description="Merchant id at the card acquirer.")
    timeStamp: DateTimeText | None = None
    terminalId: Text | None = None
    referenceNumber: Text | None = None
    authorizationCode: Text | None = None
    transactionId: Text | None = None
    receiptNumber: Text | None = None
    maskedPAN: MaskedPAN | None = Field(None, description="Masked card number.")
    APP: Text | None = None
    cardNetwork: Text | None = None
    cardType: Text | None = Field(None, description="E.g. DEBIT.")
    cardProgram: Text | None = None
    transactionRawText: LongText | None = Field(None, description="Terminal text with line breaks.")
    preAuthorizedAmount: Amount | None = None
    ENTRY: Text | None = None
    ARC: Text | None = None
    TVR: Text | None = None
    TSI: Text | None = None
    AID: Text | None = None
    AC: Text | None = None
    CID: Text | None = None
    cryptogramType: Text | None = None
    CVM: Text | None = None


class LoyaltyAttributes(Document):
    cardType: Text | None = None
    maskedPAN: MaskedPAN | None = None


class CashAttributes(Document):
    handedAmount: Amount | None = None


class _PaymentBase(Document):
    amount: Amount
    customAttributes: CustomAttributes | None = None


class CardPayment(_PaymentBase):
    type: Literal["CARD"]
    attributes: CardAttributes | None = None


class LoyaltyPayment(_PaymentBase):
    type: Literal["LOYALTY"]
    attributes: LoyaltyAttributes | None = None


class CashPayment(_PaymentBase):
    type: Literal["CASH"]
    attributes: CashAttributes | None = None


class OtherPayment(_PaymentBase):
    """Payment kinds the interface names without a structure (gift card, online…)."""

    type: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,39}$")] = Field(
        description="Upper-case payment kind, e.g. GIFT_CARD or ONLINE."
    )
    attributes: dict[str, object] | None = Field(None, description="Depends on type.")


PAYMENT_TAGS = frozenset({"CARD", "LOYALTY", "CASH"})


def _payment_tag(value: object) -> str:
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    return kind if isinstance(kind, str) and kind in PAYMENT_TAGS else "OTHER"


Payment = Annotated[
    Annotated[CardPayment, Tag("CARD")]
    | Annotated[LoyaltyPayment, Tag("LOYALTY")]
    | Annotated[CashPayment, Tag("CASH")]
    | Annotated[OtherPayment, Tag("OTHER")],
    Discriminator(_payment_tag),
]
"""A payment: ``type`` (CARD, LOYALTY, CASH or another kind), ``amount`` in fractional units,
``attributes`` whose shape depends on the type, optional ``customAttributes``."""


class Attachment(Document):
    type: Literal["BARCODE", "QRCODE"]
    kind: Literal["TICKET", "RETURN", "VOUCHER"]
    title: Text = Field(description="Shown on top of the attachment.")
    data: Annotated[str, Field(min_length=1, max_length=2000)] = Field(
        description="Data encoded into the code according to type."
    )
    description: LongText | None = Field(None, description="How the attachment is used.")
    validUntil: DateTimeText | None = Field(None, description="Last moment of validity.")


class TransactionEvent(Document):
    signedData: LongText = Field(description="Signed transaction event data.")


class Verification(Document):
    type: Text = Field(description="Verification type, e.g. OCMF.")
    version: Text = Field(description="Standard version.")
    publicKey: LongText = Field(description="Public key for verifying the data.")
    transactionId: Text
    currentType: Literal["AC", "DC"]
    transactionBegin: TransactionEvent | None = Field(
        None, description="Mandatory when currentType is AC."
    )
    transactionEnd: TransactionEvent


RECEIPT_ID_RE = re.compile(r"[0-9a-fA-F]{8}-(?:[0-9a-fA-F]{4}-){3}[0-9a-fA-F]{12}")


def _check_receipt_id(value: str) -> str:
    if not RECEIPT_ID_RE.fullmatch(value):
        raise ValueError("must be a receipt_id this service gave (a UUID)")
    return value


ReceiptIdText = Annotated[str, Field(max_length=36), AfterValidator(_check_receipt_id)]


class OriginalReceipt(Document):
    """The purchase a return returns, named by the merchant's own receipt number and time."""

    receiptNumber: Text = Field(description="The original's receiptNumber.")
    receiptTimeStamp: DateTimeText = Field(
        description="The original's receiptTimeStamp (the same moment; any offset)."
    )
    branchId: Text | None = Field(None, description="The original's merchant.branch.id.")


class Receipt(Document):
    """The receipt JSON document. Amounts are integers in the smallest currency unit."""

    type: Literal["PURCHASE", "RETURN", "PURCHASE_AND_RETURN"] | None = None
    merchant: Merchant
    products: Annotated[list[Product], Field(min_length=1, max_length=MAX_ROWS)] = Field(
        description="All products on the receipt (at least one)."
    )
    freeText: LongText | None = Field(None, description="Text displayed on the receipt.")
    vats: Annotated[list[ReceiptVat], Field(min_length=1, max_length=MAX_ITEMS)] = Field(
        description="One object per VAT rate."
    )
    payments: Annotated[list[Payment], Field(max_length=MAX_ITEMS)] | None = None
    customAttributes: CustomAttributes | None = None
    receiptNumber: Text = Field(description="Merchant's internal receipt number.")
    receiptTimeStamp: DateTimeText = Field(description="ISO 8601 date-time with offset.")
    currencyISOCode: CurrencyCode = Field(description="ISO 4217 currency code.")
    totalVATAmount: Amount
    totalPriceExcVAT: Amount
    totalPriceIncVAT: Amount
    attachments: Annotated[list[Attachment], Field(max_length=MAX_ITEMS)] | None = Field(
        None, description="Premium feature, enabled per partner."
    )
    verifications: Annotated[list[Verification], Field(max_length=MAX_ITEMS)] | None = None
    # A return may name its original (docs/api.md, "Returns and refunds"), one way or the other.
    originalReceiptId: ReceiptIdText | None = Field(
        None, description="A return's original: the receipt_id kuitti gave the purchase."
    )
    originalReceipt: OriginalReceipt | None = Field(
        None, description="A return's original: the purchase's receiptNumber and time."
    )

    @property
    def kind(self) -> str:
        return self.type or "PURCHASE"

    @property
    def is_return(self) -> bool:
        """A RETURN or PURCHASE_AND_RETURN, or a receipt with a negative row."""
        return self.kind != "PURCHASE" or any(
            p["totalAmountIncVAT"] < 0 or p["quantity"].startswith("-") for p in self.products
        )

    @property
    def names_original(self) -> bool:
        return self.originalReceiptId is not None or self.originalReceipt is not None

    @property
    def receipt_time(self) -> datetime:
        return datetime.fromisoformat(self.receiptTimeStamp)

    @field_validator("products", mode="wrap")
    @classmethod
    def _rows(cls, value: object, handler: ValidatorFunctionWrapHandler) -> object:
        return value if plain_rows(value) else handler(value)

    @field_validator("receiptNumber")
    @classmethod
    def _not_blank(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value


def decimal_of(text: str) -> Decimal:
    """A decimal string of the document as an exact Decimal (never a float)."""
    return Decimal(text)


class TokenDocument(BaseModel):
    """A delivery token (documentation model; tokens are checked by ``validation.parse_token``)."""

    type: Literal["RECEIPT_ID", "DYNAMIC_QR_CODE", "CARD", "EMAIL", "USER"]
    value: str | None = Field(
        None,
        description="Token value: the receipt identifier, QR value, masked PAN or e-mail address.",
    )
    id: str | None = Field(None, description="Required for CARD: the partner_card_id.")
    namespace: str | None = Field(
        None, description="Required for RECEIPT_ID and DYNAMIC_QR_CODE: a partner namespace."
    )
    token: str | None = Field(None, description="USER: the user's OAuth access token (a JWT).")


class TokenAttributes(BaseModel):
    tokens: list[TokenDocument] = Field(description="One or more tokens.")


class TokenReceiptRequest(BaseModel):
    """The token form of creating a receipt: a receipt and the tokens that deliver it."""

    attributes: TokenAttributes
    receipt: Receipt
