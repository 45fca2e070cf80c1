"""Calendar months in UTC: the one type that says where a month begins and ends.

A receipt belongs to a month in two ways, each with its own constructor, and the two may differ:

- **its receipt month**, ``Month.of(receipt.receipt_time)``: the UTC month of the purchase as
  the till wrote it. Archives hold one such month (``kuitti.archive``) and retention counts from
  it: it is the month the merchant's bookkeeping and the person know the receipt by, and it
  may be years before the receipt reached kuitti (a back-dated receipt);
- **its ingest month**, ``Month.of_id(receipt.id)``: the UTC month the server made its UUIDv7
  id in. PostgreSQL's monthly partitions hold one such month (``kuitti.partitions``): it is
  bounded by the server's clock, so a month that has ended takes no more rows, and it is a
  range of the ids every key already holds (``Month.first_id``).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime

_MONTH = re.compile(r"(\d{4})-(\d{2})")


@dataclass(frozen=True, order=True)
class Month:
    """A calendar month in UTC: from ``start`` up to, not including, ``end``. ``month + n`` is
    the month ``n`` months later (``n`` may be negative); ``str`` gives ``YYYY-MM``."""

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
        """The month ``moment`` falls in, in UTC (an aware datetime). For a receipt, its
        receipt month: ``Month.of(receipt_time)``."""
        utc = moment.astimezone(UTC)
        return cls(utc.year, utc.month)

    @classmethod
    def of_id(cls, row_id: uuid.UUID) -> Month:
        """The month a version 7 id was made in (its first 48 bits are the server's time in
        milliseconds, ``kuitti.ids``): a row's ingest month, the partition that holds it."""
        return cls.of(datetime.fromtimestamp((row_id.int >> 80) / 1000, UTC))

    def __add__(self, count: int) -> Month:
        index = self.year * 12 + self.month - 1 + count
        return Month(index // 12, index % 12 + 1)

    @property
    def next(self) -> Month:
        return self + 1

    @property
    def start(self) -> datetime:
        return datetime(self.year, self.month, 1, tzinfo=UTC)

    @property
    def end(self) -> datetime:
        """The start of the next month."""
        return self.next.start

    @property
    def first_id(self) -> uuid.UUID:
        """The smallest version 7 id made in this month: its first millisecond, every other bit
        zero. The ids made in the month run from it up to ``next.first_id``; ids compare as
        their bytes do, in PostgreSQL as in Python."""
        milliseconds = int(self.start.timestamp() * 1000)
        return uuid.UUID(int=milliseconds << 80)

    def __str__(self) -> str:
        return f"{self.year:04d}-{self.month:02d}"
