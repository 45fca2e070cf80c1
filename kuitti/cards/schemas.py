"""The card issuers' request bodies as schemas: an enrolment and a card transaction.

Parsed like receipts: the body is first held to the JSON rules (``kuitti.inputs``), then validated
here in one pass that reports every field's problem at once, in field order, in the interface's
error shape. Each field's rule lives in one validator; ``null`` counts as absent.
"""

from __future__ import annotations

import calendar
import re
from datetime import UTC, datetime
from functools import partial
from typing import Annotated, TypeVar

from pydantic import BaseModel, ConfigDict, Field, PlainValidator, ValidationError
from pydantic_core import ErrorDetails, PydanticCustomError

from kuitti import pan
from kuitti.errors import ErrorDetail, InvalidRequest
from kuitti.inputs import moment_in_range, parse_moment
from kuitti.models.cards import TransactionType
from kuitti.receipts.schema import ISO_4217_CODES

PARTNER_CARD_ID_MAX = 200
HOLDER_NAME_MAX = 200
AMOUNT_MAX = 10**15
_MONTH_RE = re.compile(r"([0-9]{4})-([0-9]{2})")

Model = TypeVar("Model", bound=BaseModel)


def parse_exp_date(value: str) -> datetime:
    """``YYYY-MM`` (the end of that month) or an ISO 8601 date-time with an offset, as UTC."""
    month = _MONTH_RE.fullmatch(value)
    if month is not None:
        year, mon = int(month.group(1)), int(month.group(2))
        if not 1 <= mon <= 12 or year < 2000:
            raise ValueError("not a valid month")
        last_day = calendar.monthrange(year, mon)[1]
        return moment_in_range(datetime(year, mon, last_day, 23, 59, 59, tzinfo=UTC))
    return parse_moment(value)


def _fail(code: str, reason: str) -> PydanticCustomError:
    """An error whose type is our error code and whose message follows the field name."""
    return PydanticCustomError(code, "{reason}", {"reason": reason})


def _text(value: object, limit: int) -> str:
    if not isinstance(value, str):
        raise _fail("invalid_type", "must be a string.")
    if not value.strip() or len(value) > limit:
        raise _fail("invalid_value", f"1 to {limit} characters, not blank.")
    return value


# PydanticCustomError is a ValueError: each validator checks the text before its own ``try``.


def _masked_pan(value: object) -> pan.MaskedPan:
    text = _text(value, 64)
    try:
        return pan.parse_enrolled(text)
    except pan.PanError as exc:
        raise _fail("invalid_value", str(exc)) from None


def _exp_date(value: object) -> datetime:
    text = _text(value, 64)
    try:
        return parse_exp_date(text)
    except ValueError as exc:
        raise _fail("invalid_value", f"{exc}.") from None


def _holder_name(value: object) -> str:
    name = _text(value, HOLDER_NAME_MAX)
    if pan.looks_like_full_pan(name):
        raise _fail("invalid_value", "must be the card holder's name.")
    return name


def _transaction_type(value: object) -> TransactionType:
    text = _text(value, 16)
    try:
        return TransactionType(text)
    except ValueError:
        raise _fail("invalid_value", "must be auth or clearing.") from None


def _amount(value: object) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _fail("invalid_type", "must be an integer in fractional units.")
    if abs(value) > AMOUNT_MAX:
        raise _fail("invalid_value", "out of range.")
    return value


def _currency(value: object) -> str:
    code = _text(value, 3)
    if code not in ISO_4217_CODES:
        raise _fail("invalid_value", "must be an ISO 4217 currency code.")
    return code


def _timestamp(value: object) -> datetime:
    stamp = _text(value, 64)
    try:
        return parse_moment(stamp)
    except ValueError as exc:
        raise _fail("invalid_value", f"{exc}.") from None


Text200 = Annotated[str, PlainValidator(partial(_text, limit=200))]
Text500 = Annotated[str, PlainValidator(partial(_text, limit=500))]


class _Body(BaseModel):
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)


class CardRequest(_Body):
    """A checked enrolment: ``masked_pan`` normalised, ``exp_date`` in UTC."""

    partner_card_id: Annotated[str, PlainValidator(partial(_text, limit=PARTNER_CARD_ID_MAX))]
    masked_pan: Annotated[pan.MaskedPan, PlainValidator(_masked_pan)]
    exp_date: Annotated[datetime, PlainValidator(_exp_date)]
    name: Annotated[str | None, PlainValidator(_holder_name)] = None


class TransactionRequest(_Body):
    """A checked ``POST /api/v1/card-transactions/`` body."""

    partner_card_id: Text200 | None = None
    service_card_id: Text200 | None = None
    transaction_type: Annotated[TransactionType, PlainValidator(_transaction_type)]
    amount: Annotated[int, PlainValidator(_amount)]
    currency: Annotated[str, PlainValidator(_currency)]
    occurred_at: Annotated[datetime, PlainValidator(_timestamp)] = Field(alias="timestamp")
    merchant_id: Text200
    merchant_name: Text500
    reference_number: Text200 | None = None
    authorization_code: Text200 | None = None


def _detail(error: ErrorDetails) -> ErrorDetail:
    field = str(error["loc"][0]) if error["loc"] else "$"
    if error["type"] == "missing":
        return ErrorDetail("missing_field", f"{field}: this field is required.")
    return ErrorDetail(error["type"], f"{field}: {error['msg']}")


def _validate(model: type[Model], data: object) -> tuple[Model | None, list[ErrorDetail]]:
    if not isinstance(data, dict):
        raise InvalidRequest([ErrorDetail("invalid_type", "$: the body must be a JSON object.")])
    try:
        return model.model_validate({k: v for k, v in data.items() if v is not None}), []
    except ValidationError as exc:
        return None, [_detail(error) for error in exc.errors()]


def parse_card_request(data: object) -> CardRequest:
    """An enrolment body; ``InvalidRequest`` lists every problem at once."""
    request, errors = _validate(CardRequest, data)
    if request is None:
        raise InvalidRequest(errors)
    return request


def parse_transaction_request(data: object) -> TransactionRequest:
    """A card-transaction body; ``InvalidRequest`` lists every problem at once. The card is
    named by ``partner_card_id`` or ``service_card_id``."""
    request, errors = _validate(TransactionRequest, data)
    assert isinstance(data, dict)
    if data.get("partner_card_id") is None and data.get("service_card_id") is None:
        neither = ErrorDetail(
            "missing_field", "partner_card_id: give partner_card_id or service_card_id."
        )
        card_fields = ("partner_card_id:", "service_card_id:")
        at = sum(1 for e in errors if e.description.startswith(card_fields))
        errors.insert(at, neither)
    if errors:
        raise InvalidRequest(errors)
    assert request is not None
    return request
