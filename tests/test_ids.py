"""Row identifiers: version 7 UUIDs, ordered by the time they were made."""

from __future__ import annotations

import time
import uuid

from kuitti.ids import new_id


def test_an_id_is_a_version_7_uuid_of_the_current_millisecond() -> None:
    before = time.time_ns() // 1_000_000
    made = new_id()
    after = time.time_ns() // 1_000_000
    assert made.version == 7
    assert made.variant == uuid.RFC_4122
    assert before <= made.int >> 80 <= after
    assert uuid.UUID(str(made)) == made


def test_ids_made_later_sort_later_and_never_repeat() -> None:
    earlier = [new_id() for _ in range(2000)]
    later = new_id()
    while later.int >> 80 == earlier[-1].int >> 80:  # until the clock's next millisecond
        later = new_id()
    assert len(set(earlier)) == len(earlier)
    assert max(earlier) < later
    assert max(str(i) for i in earlier) < str(later)  # as SQLite stores them: hex text
    assert len({i.int & ((1 << 62) - 1) for i in earlier}) == len(earlier)  # random bits vary
