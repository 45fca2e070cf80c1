"""The month of a receipt: the calendar month, in UTC, of its ``receipt_time`` (the purchase as
the till wrote it, converted to UTC), not of its ingest. An archive holds one such month
(``kuitti.archive``); ``Month`` is the one place that says where a month begins and ends."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime

_MONTH = re.compile(r"(\d{4})-(\d{2})")


@dataclass(frozen=True, order=True)
class Month:
    """A calendar month in UTC: from ``start`` up to, not including, ``end``."""

    year: int
    month: int

    @classmethod
    def parse(cls, text: str) -> Month:
        """``YYYY-MM``; ValueError for anything else."""
        found = _MONTH.fullmatch(text)
        if found is None or not 1 <= int(found.group(2)) <= 12 or int(found.group(1)) < 1:
            raise ValueError(f"not a month (YYYY-MM): {text!r}")
        return cls(int(found.group(1)), int(found.group(2)))

    @classmethod
    def of(cls, moment: datetime) -> Month:
        """The month ``moment`` falls in, in UTC (an aware datetime)."""
        utc = moment.astimezone(UTC)
        return cls(utc.year, utc.month)

    @property
    def start(self) -> datetime:
        return datetime(self.year, self.month, 1, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """The start of the next month."""
        following = (
            Month(self.year + 1, 1) if self.month == 12 else Month(self.year, self.month + 1)
        )
        return following.start

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"
