"""Page layouts of the receipt PDF (``?layout=`` when reading a receipt)."""

from __future__ import annotations

from enum import StrEnum


class Layout(StrEnum):
    A4 = "a4"  # an A4 page (default)
    ROLL = "roll"  # an 80 mm till roll, as tall as the receipt
