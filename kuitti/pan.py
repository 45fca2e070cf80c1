"""Masked card numbers: checking an enrolled card's, and comparing two of them.

A masked PAN is digits and mask characters (``*``, ``X``, ``x``, ``#``), optionally grouped by
spaces or hyphens. Two masked PANs *agree* when every digit both show is equal: the digits a PAN
shows before its first mask character line up with the start of the number, those after its last
mask character with the end (so ``************1234`` and ``415301******1234`` agree, as do
``XXXX1234`` and ``415301******1234``).

Nothing here ever puts a card number in an error message.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

MASK_CHARACTERS = frozenset("*Xx#")
_SEPARATORS = re.compile(r"[ -]")
_ENROLLED_RE = re.compile(r"^(\d{6})([*Xx#]{3,9})(\d{4})$")
_ANY_RE = re.compile(r"^[0-9*Xx#]{4,26}$")


class PanError(ValueError):
    """A card number that cannot be accepted; the message never contains the number."""


@dataclass(frozen=True)
class MaskedPan:
    """A masked PAN split into what it shows: leading digits, hidden length, trailing digits."""

    text: str
    leading: str
    trailing: str

    @property
    def last4(self) -> str | None:
        return self.trailing[-4:] if len(self.trailing) >= 4 else None


def of_card(masked_pan: str, first6: str, last4: str) -> MaskedPan:
    """An enrolled card's stored (normalised) masked PAN."""
    return MaskedPan(masked_pan, first6, last4)


def looks_like_full_pan(value: str) -> bool:
    """Twelve or more digits with nothing masked: a full card number, refused everywhere."""
    compact = _SEPARATORS.sub("", value)
    return compact.isdigit() and len(compact) >= 12


# A run of 14-19 digits, optionally grouped by single spaces or hyphens ("4153 0112 3456 1234").
_DIGIT_RUN = re.compile(r"(?<![\d])\d(?:[ -]?\d){13,18}(?![\d])")
# Issuer identification number ranges of the card networks, with the lengths they issue:
# Visa 4 (16, 19), Mastercard 51-55 and 2221-2720 (16), American Express 34, 37 (15),
# Diners 36, 300-305, 38-39 (14-19), Discover 6011, 644-649, 65 (16-19), JCB 3528-3589 (16-19),
# UnionPay 62 (16-19), Maestro 50, 56-58, 63, 67 (16-19). Thirteen-digit Visa numbers are no
# longer issued; leaving out 13 keeps every EAN-13 product code out.
_NETWORKS: tuple[tuple[re.Pattern[str], frozenset[int]], ...] = (
    (re.compile(r"^4"), frozenset({16, 19})),
    (re.compile(r"^(5[1-5]|222[1-9]|22[3-9]\d|2[3-6]\d\d|27[01]\d|2720)"), frozenset({16})),
    (re.compile(r"^3[47]"), frozenset({15})),
    (re.compile(r"^(36|30[0-5]|3[89])"), frozenset(range(14, 20))),
    (
        re.compile(r"^(6011|64[4-9]|65|62|35(2[89]|[3-8]\d)|50|5[6-8]|63|67)"),
        frozenset(range(16, 20)),
    ),
)


def luhn_valid(digits: str) -> bool:
    total = 0
    for i, char in enumerate(reversed(digits)):
        value = int(char) * (2 if i % 2 else 1)
        total += value - 9 if value > 9 else value
    return total % 10 == 0


def is_card_number(digits: str) -> bool:
    """A Luhn-valid number of a length some card network issues in that network's IIN range."""
    return luhn_valid(digits) and any(
        prefix.match(digits) and len(digits) in lengths for prefix, lengths in _NETWORKS
    )


def contains_card_number(text: str, *, grouped_only: bool = False) -> bool:
    """True when the text holds a full card number, possibly grouped by spaces or hyphens.
    ``grouped_only``: only a number written grouped, as cards print it ("4111 1111 1111 1111");
    a bare run of digits is as often an order or loyalty number
    (``bench/pan_false_positives.py``)."""
    return any(
        is_card_number(_SEPARATORS.sub("", run.group()))
        for run in _DIGIT_RUN.finditer(text)
        if not grouped_only or _SEPARATORS.search(run.group())
    )


def parse_enrolled(value: str) -> MaskedPan:
    """An issuer's masked PAN: first six and last four digits shown, everything between masked,
    13–19 characters in all. Returned normalised (no separators, mask characters as ``*``)."""
    if looks_like_full_pan(value):
        raise PanError(
            "looks like a full card number; full card numbers are never accepted. "
            "Send it masked, e.g. 415301******1234."
        )
    compact = _SEPARATORS.sub("", value)
    match = _ENROLLED_RE.match(compact)
    if match is None or not 13 <= len(compact) <= 19:
        raise PanError(
            "must be a masked card number showing the first six and last four digits with "
            "every digit between them masked (* X x #), 13 to 19 characters, "
            "e.g. 415301******1234."
        )
    first6, hidden, last4 = match.groups()
    return MaskedPan(first6 + "*" * len(hidden) + last4, first6, last4)


def parse_shown(value: str) -> MaskedPan | None:
    """A receipt's (or token's) masked PAN as far as it can be read; None when it shows no
    digits at the end (nothing to compare) or is not a masked PAN at all."""
    compact = _SEPARATORS.sub("", value)
    if not _ANY_RE.match(compact) or looks_like_full_pan(value):
        return None
    leading = re.match(r"^\d*", compact)
    trailing = re.search(r"\d*$", compact)
    assert leading is not None
    assert trailing is not None
    if len(leading.group()) == len(compact):
        # All digits but short (under 12): a number that shows only its last digits.
        return MaskedPan(compact, "", compact)
    return MaskedPan(compact, leading.group(), trailing.group())


def agree(card: MaskedPan, shown: MaskedPan) -> bool:
    """Every digit both show is equal (see the module docstring for how they line up)."""
    if len(card.text) == len(shown.text):
        return all(
            a == b or a in MASK_CHARACTERS or b in MASK_CHARACTERS
            for a, b in zip(card.text, shown.text, strict=True)
        )
    lead = min(len(card.leading), len(shown.leading))
    trail = min(len(card.trailing), len(shown.trailing))
    return card.leading[:lead] == shown.leading[:lead] and (
        trail == 0 or card.trailing[-trail:] == shown.trailing[-trail:]
    )
