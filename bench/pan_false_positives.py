"""How often the full-card-number detector fires on receipts that hold none (false positives),
and how often it finds a card number that is there (true positives).

Generates realistic receipt values with a fixed seed: EAN-13/EAN-8/GTIN-14 product codes with
valid GS1 check digits, order numbers (10-20 random digits), Finnish bank reference numbers
(with their 7-3-1 check digit), archive ids (date + sequence, 18-20 digits), terminal ids,
timestamps written as digits, loyalty-card numbers (16-19 digits) and phone numbers. Then the
same receipts with a Luhn-valid card number of a real network put in the free text.

    .venv/bin/python bench/pan_false_positives.py [RECEIPTS]
"""

from __future__ import annotations

import random
import sys
from collections import Counter
from collections.abc import Callable

from kuitti.pan import contains_card_number, luhn_valid

SEED = 20261123


def gs1(rng: random.Random, length: int) -> str:
    body = "".join(rng.choice("0123456789") for _ in range(length - 1))
    total = sum(int(d) * (3 if i % 2 == 0 else 1) for i, d in enumerate(reversed(body)))
    return body + str((10 - total % 10) % 10)


def finnish_reference(rng: random.Random) -> str:
    body = str(rng.randrange(10**3, 10**19))
    weights = (7, 3, 1)
    total = sum(int(d) * weights[i % 3] for i, d in enumerate(reversed(body)))
    return body + str((10 - total % 10) % 10)


def digits(rng: random.Random, low: int, high: int) -> str:
    return "".join(rng.choice("0123456789") for _ in range(rng.randint(low, high)))


def card_number(rng: random.Random) -> str:
    prefix, length = rng.choice(
        [("4", 16), ("51", 16), ("55", 16), ("2221", 16), ("34", 15), ("37", 15), ("6011", 16),
         ("3530", 16), ("62", 19), ("4", 19), ("36", 14)]
    )  # fmt: skip
    body = prefix + "".join(rng.choice("0123456789") for _ in range(length - len(prefix) - 1))
    check = next(str(d) for d in range(10) if luhn_valid(body + str(d)))
    number = body + check
    if rng.random() < 0.3:
        return " ".join(number[i : i + 4] for i in range(0, len(number), 4))
    return number


KINDS: dict[str, Callable[[random.Random], str]] = {
    "EAN-13": lambda rng: gs1(rng, 13),
    "EAN-8": lambda rng: gs1(rng, 8),
    "GTIN-14": lambda rng: gs1(rng, 14),
    "order number": lambda rng: digits(rng, 10, 20),
    "reference number": finnish_reference,
    "archive id": lambda rng: (
        f"2026{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}" + digits(rng, 10, 12)
    ),
    "terminal id": lambda rng: digits(rng, 8, 12),
    "timestamp digits": lambda rng: (
        f"2026{rng.randint(1, 12):02d}{rng.randint(1, 28):02d}"
        f"{rng.randint(0, 23):02d}{rng.randint(0, 59):02d}{rng.randint(0, 59):02d}"
    ),
    "loyalty card": lambda rng: digits(rng, 16, 19),
    "phone": lambda rng: f"+358 {rng.randint(40, 50)} {rng.randint(100, 999)} {digits(rng, 4, 4)}",
}


def receipt_values(rng: random.Random) -> list[tuple[str, str]]:
    values = [("EAN-13", KINDS["EAN-13"](rng)) for _ in range(rng.randint(3, 30))]
    values += [
        (kind, KINDS[kind](rng)) for kind in KINDS if kind != "EAN-13" and rng.random() < 0.5
    ]
    return values


def main() -> None:
    receipts = int(sys.argv[1]) if len(sys.argv) > 1 else 20_000
    rng = random.Random(SEED)
    flagged_receipts = flagged_grouped = 0
    values_seen: Counter[str] = Counter()
    values_flagged: Counter[str] = Counter()
    found = found_grouped = grouped_cards = 0
    for _ in range(receipts):
        values = receipt_values(rng)
        hit = False
        for kind, value in values:
            values_seen[kind] += 1
            if contains_card_number(value):
                values_flagged[kind] += 1
                hit = True
        flagged_receipts += hit
        flagged_grouped += any(contains_card_number(v, grouped_only=True) for _, v in values)
        number = card_number(rng)
        free_text = f"Kiitos käynnistä! Kortti {number} hyväksytty."
        found += contains_card_number(free_text)
        if " " in number:
            grouped_cards += 1
            found_grouped += contains_card_number(free_text, grouped_only=True)
    print(f"{receipts} generated receipts, seed {SEED}")
    print(f"false positives: {flagged_receipts} receipts ({flagged_receipts / receipts:.3%})")
    for kind in KINDS:
        seen, flagged = values_seen[kind], values_flagged[kind]
        print(f"  {kind:17} {flagged:6} of {seen:7} values ({flagged / seen:.3%})")
    print(f"true positives: {found} of {receipts} card numbers in free text")
    print("grouped only (what kuitti refuses in a receipt document):")
    print(f"  false positives: {flagged_grouped} receipts ({flagged_grouped / receipts:.3%})")
    print(f"  true positives: {found_grouped} of {grouped_cards} grouped card numbers")


if __name__ == "__main__":
    main()
