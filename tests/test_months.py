"""The month of a receipt (``kuitti.months``): its bounds in UTC, whatever the offset a till
wrote."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

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
