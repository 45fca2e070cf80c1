"""Row identifiers: version 7 UUIDs, ordered by the time they were made."""

from __future__ import annotations

import os
import time
import uuid

from kuitti.ids import new_id, random_bytes


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


def test_random_bytes_never_hand_out_the_same_bytes_twice() -> None:
    """The block is shared by the calls of a thread: each takes bytes after the last one's, a
    new block is read when it runs out, and a request larger than a block is served whole."""
    taken = [random_bytes(10) for _ in range(1000)]  # more than two 4 KB blocks
    assert all(len(part) == 10 for part in taken)
    assert len(set(taken)) == len(taken)
    assert len(random_bytes(10_000)) == 10_000


def test_a_forked_child_does_not_repeat_its_parents_random_bytes() -> None:
    random_bytes(1)  # the parent holds a block with bytes left in it
    reading, writing = os.pipe()
    child = os.fork()
    if child == 0:  # pragma: no cover (the child's coverage is not collected)
        os.write(writing, random_bytes(32))
        os._exit(0)
    os.close(writing)
    try:
        from_child = os.read(reading, 32)
    finally:
        os.close(reading)
        os.waitpid(child, 0)
    assert len(from_child) == 32
    assert from_child != random_bytes(32)
