"""The card and card-transaction bodies: every problem at once, in field order, with the
messages issuers already rely on."""

from __future__ import annotations

from typing import Any

import pytest

from kuitti.cards.schemas import parse_card_request, parse_transaction_request
from kuitti.errors import InvalidRequest


def errors(parse: Any, body: object) -> list[tuple[str, str]]:
    with pytest.raises(InvalidRequest) as caught:
        parse(body)
    return [(e.code, e.description) for e in caught.value.details()]


def test_card_fields_of_the_wrong_type() -> None:
    assert errors(parse_card_request, {"partner_card_id": 1, "exp_date": False, "name": []}) == [
        ("invalid_type", "partner_card_id: must be a string."),
        ("missing_field", "masked_pan: this field is required."),
        ("invalid_type", "exp_date: must be a string."),
        ("invalid_type", "name: must be a string."),
    ]


def test_card_values_that_break_a_rule() -> None:
    body = {"partner_card_id": " ", "masked_pan": "4153", "exp_date": "2028-13", "name": None}
    assert [code for code, _ in errors(parse_card_request, body)] == ["invalid_value"] * 3
    assert errors(parse_card_request, body)[2] == ("invalid_value", "exp_date: not a valid month.")


def test_transaction_without_a_card_and_with_bad_fields() -> None:
    body = {"transaction_type": "refund", "amount": 1.5, "currency": "EURO", "timestamp": 3}
    assert errors(parse_transaction_request, body) == [
        ("missing_field", "partner_card_id: give partner_card_id or service_card_id."),
        ("invalid_value", "transaction_type: must be auth or clearing."),
        ("invalid_type", "amount: must be an integer in fractional units."),
        ("invalid_value", "currency: 1 to 3 characters, not blank."),
        ("invalid_type", "timestamp: must be a string."),
        ("missing_field", "merchant_id: this field is required."),
        ("missing_field", "merchant_name: this field is required."),
    ]


def test_a_valid_transaction() -> None:
    request = parse_transaction_request(
        {
            "service_card_id": "c",
            "transaction_type": "auth",
            "amount": -250,
            "currency": "EUR",
            "timestamp": "2026-01-15T14:03:11+02:00",
            "merchant_id": "m",
            "merchant_name": "Kauppa",
            "reference_number": None,
        }
    )
    assert request.amount == -250
    assert request.occurred_at.isoformat() == "2026-01-15T12:03:11+00:00"
    assert request.reference_number is None
