"""From request bytes to a checked receipt and its tokens, or every failure at once.

Three passes, each reporting everything it finds: the JSON itself, the shape of the document
(Pydantic), then the rules that span fields (arithmetic, verifications, attachments). The rules
run only on a document of the right shape, since sums over malformed rows mean nothing.

Why one long module: the rules across fields are many small functions over one ``Receipt``, and
the quick path and the reference path (``fully=True``) must stay visibly the same checks.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import re
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from decimal import Decimal
from enum import StrEnum
from functools import cached_property
from typing import Any

import msgspec
import orjson
from email_validator import EmailNotValidError, validate_email
from pydantic import ValidationError
from pydantic_core import ErrorDetails

from kuitti.errors import ErrorDetail, InvalidRequest
from kuitti.inputs import INT64_MAX, BodyScan, json_path, parse_json, parse_json_fully, scan_body
from kuitti.pan import contains_card_number
from kuitti.receipts.schema import PATTERN_MESSAGES, Receipt, row_type_at

MAX_TOKENS = 50
TOKEN_TEXT_MAX = 4096

_TYPE_ERRORS = frozenset(
    {
        "int_type",
        "int_from_float",
        "float_type",
        "string_type",
        "bool_type",
        "list_type",
        "dict_type",
        "model_type",
        "model_attributes_type",
        "dataclass_type",
        "none_required",
        "is_instance_of",
    }
)


class TokenType(StrEnum):
    RECEIPT_ID = "RECEIPT_ID"
    DYNAMIC_QR_CODE = "DYNAMIC_QR_CODE"
    CARD = "CARD"
    EMAIL = "EMAIL"
    USER = "USER"


@dataclass(frozen=True)
class Token:
    """One delivery token. For USER tokens ``value`` holds the JWT (posted as ``token``).
    ``shareable``: a RECEIPT_ID link any number of accounts may import (docs/delivery.md)."""

    type: TokenType
    value: str
    id: str | None = None
    namespace: str | None = None
    shareable: bool = False


@dataclass(frozen=True)
class ReceiptRequest:
    receipt: Receipt
    document: dict[str, Any]
    tokens: list[Token]
    posted: dict[str, Any] | None = None
    """The whole body as parsed (the token form wraps ``document``); ``None`` when it is
    ``document`` itself."""
    source: bytes | None = None
    """The document's bytes exactly as posted: the whole body, or in the token form the value
    of ``"receipt"`` from its ``{`` to its ``}``. ``None`` for a request built in code (the
    demo), whose document is stored as orjson writes it."""

    def document_bytes(self) -> bytes:
        """What kuitti stores as the receipt's document, and serves as ``service_json``."""
        return self.source if self.source is not None else orjson.dumps(self.document)

    @cached_property
    def document_hash(self) -> str:
        return canonical_hash(self.document)

    @property
    def resend_hash(self) -> str:
        """What the stored receipt keeps as its ``document_hash``: under RECEIPT_ID tokens,
        ``document_hash``, which a resend of the receipt is compared with (``checks``); empty
        for any other receipt, which no resend can name (hashing every document would cost a
        post about 5 % of its CPU)."""
        if any(token.type is TokenType.RECEIPT_ID for token in self.tokens):
            return self.document_hash
        return ""

    @cached_property
    def body_hash(self) -> str:
        """The canonical hash of the whole body, for an Idempotency-Key: no second parse."""
        return self.document_hash if self.posted is None else canonical_hash(self.posted)


def canonical_hash(document: object) -> str:
    """Equal for documents equal as JSON, whatever their key order and whitespace."""
    return hashlib.sha256(orjson.dumps(document, option=orjson.OPT_SORT_KEYS)).hexdigest()


def parse_receipt_request(
    body: bytes, *, attachments_enabled: bool, fully: bool = False
) -> ReceiptRequest:
    """Validate a create-receipt body (either form) and return what ingest needs.

    ``fully`` takes the reference way at each step that has a quick one giving the same answer:
    the JSON read by ``inputs.parse_json_fully``, every document walked for full card numbers.
    The differential tests and ``bench/validation.py`` compare the two."""
    scan = scan_body(body)
    data = parse_json_fully(body) if fully else parse_json(body, scan=scan)
    if not isinstance(data, dict):
        raise InvalidRequest(
            [ErrorDetail("invalid_type", "$: the body must be a JSON object (a receipt document).")]
        )
    errors: list[ErrorDetail] = []
    tokens: list[Token] = []
    prefix: tuple[str | int, ...] = ()
    posted: dict[str, Any] | None = None
    source = body
    if "receipt" in data or "attributes" in data:
        posted = data
        tokens = _parse_attributes(data.get("attributes"), errors)
        document = data.get("receipt")
        prefix = ("receipt",)
        if document is None:
            errors.append(ErrorDetail("missing_field", "receipt: this field is required."))
            raise InvalidRequest(errors)
        if not isinstance(document, dict):
            errors.append(ErrorDetail("invalid_type", "receipt: must be a JSON object."))
            raise InvalidRequest(errors)
        source = bytes(_TOKEN_FORM.decode(body).receipt)
    else:
        document = data
    try:
        receipt = Receipt.model_validate(document)
    except ValidationError as exc:
        errors.extend(_shape_errors(exc.errors(), document, prefix))
        raise InvalidRequest(errors) from None
    errors.extend(check_rules(receipt, prefix, attachments_enabled=attachments_enabled))
    errors.extend(_inexact_numbers(receipt, source, prefix))
    if fully or _may_hold_card_number(body, scan):
        errors.extend(_card_numbers(document, prefix))
    if errors:
        raise InvalidRequest(errors)
    return ReceiptRequest(receipt, document, tokens, posted, source)


class _TokenForm(msgspec.Struct):
    """The token form's ``"receipt"`` value as its bytes: msgspec's ``Raw`` is the exact span
    of a value in the body, found by its parser (other keys are skipped, and the body has been
    read as JSON with no key twice before this runs)."""

    receipt: msgspec.Raw = msgspec.Raw()


_TOKEN_FORM = msgspec.json.Decoder(_TokenForm)

_FLOAT_FIELDS = ("distance", "duration")
"""The numbers of the document that kuitti reads as floats (a journey's, shown on the receipt):
every other number it computes with is an integer, which Python holds exactly (the JSON edge
refuses one beyond 64 bits)."""


def _inexact_numbers(
    receipt: Receipt, source: bytes, prefix: tuple[str | int, ...]
) -> Iterator[ErrorDetail]:
    """A float field whose posted number the float kuitti computes with does not equal
    (``1.2345678901234567890``, ``1e-400``), or that is larger than any integer kuitti takes
    (the views' decimal arithmetic could not round it): refused, so that what the receipt shows
    is what its document says. The float's value is its shortest decimal (``repr``), which is
    what the views format (``kuitti.receipts.view``); ``0.1000`` and ``1E2`` are that value,
    written otherwise, and pass. Only a journey's row is looked at again, in the posted text."""
    floats = [
        (index, name, value)
        for index, row in enumerate(receipt.products)
        if (journey := row.get("journey")) is not None
        for name in _FLOAT_FIELDS
        if type(value := getattr(journey, name)) is float
    ]
    if not floats:
        return
    written = json.loads(source, parse_float=Decimal)["products"]
    for index, name, value in floats:
        path = json_path((*prefix, "products", index, "journey", name))
        if value > INT64_MAX:
            yield ErrorDetail("invalid_value", f"{path}: the number is too large.")
        elif Decimal(repr(value)) != written[index]["journey"][name]:
            yield ErrorDetail(
                "invalid_value",
                f"{path}: kuitti computes with this number as a 64-bit float, which cannot hold "
                "it exactly; send at most 15 significant digits.",
            )


_SEND_MASKED = "full card numbers are never accepted (send it masked, e.g. 415301******1234)."
_CARD_KEY = re.compile(r"pan|card", re.IGNORECASE)


# A full card number has at least 14 digits, at most one space or hyphen between two of them.
# The regular expression tries every digit of the body, so it runs only where ``scan_body``
# found 14 bytes in a row that are digits, spaces or hyphens.
_ASCII_DIGIT_RUN = re.compile(rb"[0-9][0-9 -]{13}")
_ASCII_BYTES = bytes(range(128))
_DIGIT_OR_SEPARATOR = re.compile(r"[\d -]")


def _may_hold_card_number(body: bytes, scan: BodyScan) -> bool:
    """False when no string or number of the JSON body can hold a card number, which spares
    the walk of ``_card_numbers`` (most of validation's cost) for nearly every receipt.

    Every character of a JSON value is in the body as itself or as a ``\\u`` escape. Unless an
    escape spells a digit, a space, a hyphen or half of a surrogate pair, or the text has a
    digit outside ASCII, a run of digits in any value is also a run of ASCII digits in the body.
    (Scanning bytes for ASCII digits is several times faster than ``\\d`` over text.)"""
    if scan.long_numbers and _ASCII_DIGIT_RUN.search(body) is not None:
        return True
    for digits in scan.escapes:
        code = int(digits, 16)
        if 0xD800 <= code <= 0xDFFF or _DIGIT_OR_SEPARATOR.match(chr(code)):
            return True
    if body.isascii():  # a client that escapes every character beyond ASCII, as Python's does
        return False
    # Deleting the ASCII bytes of valid UTF-8 leaves whole characters.
    beyond_ascii = body.translate(None, _ASCII_BYTES).decode("utf-8")
    return any(char.isdecimal() for char in set(beyond_ascii))


def _card_numbers(node: object, path: tuple[str | int, ...]) -> Iterator[ErrorDetail]:
    """Full card numbers anywhere in the document (docs/security.md): refused when written
    grouped as cards print them, or under a key that names a card; a bare run of digits elsewhere
    is too often an order or loyalty number to refuse."""
    if isinstance(node, dict):
        for key, value in node.items():
            scalar = isinstance(value, str | int) and not isinstance(value, bool)
            if scalar and _CARD_KEY.search(key) and contains_card_number(str(value)):
                yield ErrorDetail(
                    "invalid_value",
                    f"{json_path((*path, key))}: looks like a full card number; {_SEND_MASKED}",
                )
            else:
                yield from _card_numbers(value, (*path, key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            yield from _card_numbers(value, (*path, index))
    elif isinstance(node, str) and contains_card_number(node, grouped_only=True):
        yield ErrorDetail(
            "invalid_value", f"{json_path(path)}: looks like a full card number; {_SEND_MASKED}"
        )


def _shape_errors(
    raw: Sequence[ErrorDetails], document: object, prefix: tuple[str | int, ...]
) -> list[ErrorDetail]:
    """Map Pydantic's errors to ours, one per JSON path, in document order."""
    by_path: dict[str, tuple[str, str]] = {}
    for error in raw:
        path = json_path((*prefix, *_real_path(document, error["loc"])))
        code = _code_for(error)
        message = _message_for(error)
        seen = by_path.get(path)
        # A union reports one error per member: a value error means the type was right.
        if seen is None or (seen[0] == "invalid_type" and code == "invalid_value"):
            by_path[path] = (code, message)
    return [ErrorDetail(code, f"{path}: {message}") for path, (code, message) in by_path.items()]


def _real_path(document: object, loc: tuple[int | str, ...]) -> list[str | int]:
    """Drop the union-member tags Pydantic adds to ``loc``, keeping only real JSON keys."""
    node: object = document
    path: list[str | int] = []
    for index, part in enumerate(loc):
        last = index == len(loc) - 1
        if isinstance(node, list) and isinstance(part, int):
            node = node[part] if 0 <= part < len(node) else None
            path.append(part)
        elif isinstance(node, dict) and isinstance(part, str) and (part in node or last):
            node = node.get(part)
            path.append(part)
        elif isinstance(node, dict) and isinstance(part, str) and part.startswith("[key]"):
            path.append(part)
    return path


def _code_for(error: ErrorDetails) -> str:
    kind = error["type"]
    if kind == "missing":
        return "missing_field"
    if kind == "int_type" and _is_json_integer(error.get("input")):
        return "invalid_value"  # an integer too large for any amount: right type, wrong value
    if kind in _TYPE_ERRORS:
        return "invalid_type"
    if kind in {"literal_error", "enum"} and not isinstance(error.get("input"), str):
        return "invalid_type"
    return "invalid_value"


def _is_json_integer(value: object) -> bool:
    """An integer literal, also one beyond 64 bits (orjson reads those as floats)."""
    if isinstance(value, float):
        return value.is_integer() and abs(value) >= 2**63
    return isinstance(value, int) and not isinstance(value, bool)


def _message_for(error: ErrorDetails) -> str:
    kind = error["type"]
    if kind == "missing":
        return "this field is required."
    if kind == "int_type" and _is_json_integer(error.get("input")):
        return "the integer is out of range."
    if kind == "extra_forbidden":
        return "unexpected field."
    message = error["msg"].removeprefix("Value error, ")
    if kind == "dict_type" and (row := row_type_at(error["loc"])) is not None:
        message = f"Input should be a valid dictionary or instance of {row}"
    if kind == "string_pattern_mismatch":  # decimal text: our words, not the pattern
        message = PATTERN_MESSAGES.get(str(error.get("ctx", {}).get("pattern")), message)
    # Never echo inputs back: a mistaken full card number must not reach a log or a response.
    return message[0].lower() + message[1:] + ("" if message.endswith(".") else ".")


def _parse_attributes(attributes: object, errors: list[ErrorDetail]) -> list[Token]:
    if attributes is None:
        return []
    if not isinstance(attributes, dict):
        errors.append(ErrorDetail("invalid_type", "attributes: must be a JSON object."))
        return []
    raw_tokens = attributes.get("tokens")
    if raw_tokens is None:
        return []
    if not isinstance(raw_tokens, list):
        errors.append(ErrorDetail("invalid_type", "attributes.tokens: must be a JSON array."))
        return []
    if len(raw_tokens) > MAX_TOKENS:
        errors.append(
            ErrorDetail(
                "invalid_value", f"attributes.tokens: at most {MAX_TOKENS} tokens per request."
            )
        )
        return []
    tokens = []
    for index, raw in enumerate(raw_tokens):
        path = f"attributes.tokens[{index}]"
        try:
            tokens.append(parse_token(raw))
        except ValueError as exc:
            errors.append(ErrorDetail("invalid_token", f"{path}: {exc}"))
    return tokens


def parse_token(raw: object) -> Token:
    """One token object; a ValueError says what is wrong with it."""
    if not isinstance(raw, dict):
        raise ValueError("a token must be a JSON object.")
    kind = raw.get("type")
    if not isinstance(kind, str) or kind not in TokenType.__members__:
        allowed = ", ".join(TokenType)
        raise ValueError(f"type must be one of {allowed}.")
    token_type = TokenType(kind)
    fields: dict[str, str | None] = {}
    for name in ("value", "id", "namespace", "token"):
        field = raw.get(name)
        if field is not None and (not isinstance(field, str) or len(field) > TOKEN_TEXT_MAX):
            raise ValueError(f"{name} must be a string of at most {TOKEN_TEXT_MAX} characters.")
        fields[name] = field or None
    value = fields["token"] or fields["value"] if token_type is TokenType.USER else fields["value"]
    if value is None:
        wanted = "token" if token_type is TokenType.USER else "value"
        raise ValueError(f"{wanted} is required for a {token_type} token.")
    if token_type in {TokenType.RECEIPT_ID, TokenType.DYNAMIC_QR_CODE} and not fields["namespace"]:
        raise ValueError(f"namespace is required for a {token_type} token.")
    if token_type is TokenType.RECEIPT_ID and len(value) > 200:
        raise ValueError("a receipt identifier has at most 200 characters.")
    shareable = raw.get("shareable") if token_type is TokenType.RECEIPT_ID else None
    if shareable is None:  # absent, or null as for the other keys
        shareable = False
    elif not isinstance(shareable, bool):
        raise ValueError("shareable must be true or false.")
    if token_type is TokenType.CARD and not fields["id"]:
        raise ValueError("id (the partner_card_id) is required for a CARD token.")
    if token_type is TokenType.CARD and contains_card_number(value):
        raise ValueError(f"value looks like a full card number; {_SEND_MASKED}")
    if token_type is TokenType.EMAIL:
        try:
            value = validate_email(value, check_deliverability=False).normalized
        except EmailNotValidError as exc:
            raise ValueError(f"value is not a valid e-mail address ({exc}).") from None
    if token_type is TokenType.USER and not _looks_like_jwt(value):
        raise ValueError("token is not a JSON Web Token (header.payload.signature).")
    return Token(token_type, value, fields["id"], fields["namespace"], shareable)


def _looks_like_jwt(value: str) -> bool:
    parts = value.split(".")
    if len(parts) != 3 or not all(parts[:2]):
        return False
    try:
        header = json.loads(base64.urlsafe_b64decode(parts[0] + "=" * (-len(parts[0]) % 4)))
        json.loads(base64.urlsafe_b64decode(parts[1] + "=" * (-len(parts[1]) % 4)))
    except (ValueError, binascii.Error, UnicodeDecodeError):
        return False
    return isinstance(header, dict) and isinstance(header.get("alg"), str)


def check_rules(
    receipt: Receipt, prefix: tuple[str | int, ...] = (), *, attachments_enabled: bool
) -> list[ErrorDetail]:
    """Rules across fields: totals that add up, verifications, premium attachments."""
    errors: list[ErrorDetail] = []

    def at(*parts: str | int) -> str:
        return json_path((*prefix, *parts))

    def total(path: tuple[str | int, ...], expected: int, actual: int, how: str) -> None:
        # The path is spelt out only for a failing check: building it for every row cost more
        # than the arithmetic.
        if expected != actual:
            errors.append(
                ErrorDetail(
                    "inconsistent_totals",
                    f"{at(*path)}: is {expected} but {how} gives {actual}.",
                )
            )

    total(
        ("totalPriceIncVAT",),
        receipt.totalPriceIncVAT,
        receipt.totalPriceExcVAT + receipt.totalVATAmount,
        "totalPriceExcVAT + totalVATAmount",
    )
    total(
        ("totalVATAmount",),
        receipt.totalVATAmount,
        sum(v.totalVATAmount for v in receipt.vats),
        "the sum of vats[].totalVATAmount",
    )
    total(
        ("totalPriceExcVAT",),
        receipt.totalPriceExcVAT,
        sum(v.totalAmountExcVAT for v in receipt.vats),
        "the sum of vats[].totalAmountExcVAT",
    )
    total(
        ("totalPriceIncVAT",),
        receipt.totalPriceIncVAT,
        sum(v.totalAmountIncVAT for v in receipt.vats),
        "the sum of vats[].totalAmountIncVAT",
    )
    for i, vat in enumerate(receipt.vats):
        total(
            ("vats", i, "totalAmountIncVAT"),
            vat.totalAmountIncVAT,
            vat.totalAmountExcVAT + vat.totalVATAmount,
            "totalAmountExcVAT + totalVATAmount",
        )
    for i, product in enumerate(receipt.products):
        parts = product["vats"]
        if len(parts) == 1:  # the usual row, checked with no loop and no call
            part = parts[0]
            exc, inc = part["totalAmountExcVAT"], part["totalAmountIncVAT"]
            if (
                product["totalAmountExcVAT"] == exc
                and product["totalAmountIncVAT"] == inc
                and inc == exc + part["VATAmount"]
            ):
                continue
        else:
            exc = sum(v["totalAmountExcVAT"] for v in parts)
            inc = sum(v["totalAmountIncVAT"] for v in parts)
        total(
            ("products", i, "totalAmountExcVAT"),
            product["totalAmountExcVAT"],
            exc,
            "the sum of its vats[].totalAmountExcVAT",
        )
        total(
            ("products", i, "totalAmountIncVAT"),
            product["totalAmountIncVAT"],
            inc,
            "the sum of its vats[].totalAmountIncVAT",
        )
        for j, part in enumerate(parts):
            total(
                ("products", i, "vats", j, "totalAmountIncVAT"),
                part["totalAmountIncVAT"],
                part["totalAmountExcVAT"] + part["VATAmount"],
                "totalAmountExcVAT + VATAmount",
            )
    if receipt.kind == "PURCHASE" and receipt.payments is not None:
        total(
            ("payments",),
            receipt.totalPriceIncVAT,
            sum(p.amount for p in receipt.payments),
            "the sum of payments[].amount (must equal totalPriceIncVAT)",
        )
    for i, verification in enumerate(receipt.verifications or []):
        if verification.currentType == "AC" and verification.transactionBegin is None:
            errors.append(
                ErrorDetail(
                    "missing_field",
                    f"{at('verifications', i, 'transactionBegin')}: required when currentType "
                    "is AC.",
                )
            )
    if receipt.originalReceiptId is not None and receipt.originalReceipt is not None:
        errors.append(
            ErrorDetail(
                "invalid_value",
                f"{at('originalReceipt')}: name the original once, by originalReceiptId or by "
                "originalReceipt, not both.",
            )
        )
    elif receipt.names_original and not receipt.is_return:
        named = "originalReceiptId" if receipt.originalReceiptId is not None else "originalReceipt"
        errors.append(
            ErrorDetail(
                "invalid_value",
                f"{at(named)}: only a return names an original (type RETURN or "
                "PURCHASE_AND_RETURN, or a row with a negative quantity or amount).",
            )
        )
    if receipt.attachments and not attachments_enabled:
        errors.append(
            ErrorDetail(
                "attachments_not_enabled",
                f"{at('attachments')}: attachments are a premium feature not enabled for this "
                "partner.",
            )
        )
    return errors
