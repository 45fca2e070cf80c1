"""Months (``kuitti.months``): a receipt month's bounds in UTC, whatever the offset a till
wrote; an ingest month from a UUIDv7 and its range of ids."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from kuitti.ids import new_id
from kuitti.months import Month


def test_a_month_runs_from_its_first_midnight_to_the_next_months_in_utc() -> None:
    december = Month.parse("2025-12")
    assert (december.start, december.end) == (
        datetime(2025, 12, 1, tzinfo=UTC),
        datetime(2026, 1, 1, tzinfo=UTC),
    )
    assert str(december) == "2025-12"


def test_the_month_of_a_moment_is_taken_in_utc() -> None:
    helsinki = timezone(timedelta(hours=2))
    assert Month.of(datetime(2026, 2, 1, 1, 30, tzinfo=helsinki)) == Month(2026, 1)
    assert Month.of(datetime(2026, 2, 1, 2, 0, tzinfo=helsinki)) == Month(2026, 2)


@pytest.mark.parametrize("text", ["2026-13", "2026-00", "2026-1", "26-01", "2026-01-01", ""])
def test_anything_but_yyyy_mm_is_refused(text: str) -> None:
    with pytest.raises(ValueError, match="not a month"):
        Month.parse(text)


def test_months_count_across_years_both_ways() -> None:
    assert Month(2026, 11) + 3 == Month(2027, 2)
    assert Month(2027, 1) + -1 == Month(2026, 12)
    assert Month(2026, 12).next == Month(2027, 1)
    assert Month(2026, 12).end == Month(2027, 1).start


def test_an_ids_month_is_the_month_it_was_made_in_and_its_first_id_bounds_it() -> None:
    """The ingest month (partitions) from a UUIDv7's time, and the month's id range."""
    january = Month(2027, 1)
    first = january.first_id
    assert Month.of_id(first) == january
    assert Month.of_id(uuid.UUID(int=january.next.first_id.int - 1)) == january
    assert Month.of_id(january.next.first_id) == Month(2027, 2)
    made = new_id()
    assert Month.of_id(made) == Month.of(datetime.now(UTC))
    assert Month.of_id(made).first_id <= made < Month.of_id(made).next.first_id
