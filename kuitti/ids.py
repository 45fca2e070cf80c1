"""Identifiers of stored rows: time-ordered UUIDs (version 7, RFC 9562).

A random (version 4) key lands on a random page of every index that holds it, so each receipt
of a batch would dirty pages of its own in the primary keys and the receipt-id indexes of
``receipts``, ``receipt_grants`` and ``card_payments``. A version 7 key starts with the time in
milliseconds, so the keys of a batch go to the same last pages, which saves about 12 % of the
ingest writer's CPU on SQLite (``bench/write_batch.py``). The 74 random bits keep the ids
unguessable; they reveal when the row was made, which every reader of it sees anyway.

Python 3.14 has ``uuid.uuid7``; until kuitti requires it, this is the RFC's layout.

The random bits come from ``os.urandom`` read 4 KB at a time (``random_bytes``): each call
releases the interpreter's lock around its system call, and the process's other thread (the
event loop, or the ingest writer) takes it: read one at a time, a stored receipt's three ids
and each request's id (``kuitti.middleware``) would be as many hand-overs of the lock.
"""

from __future__ import annotations

import os
import threading
import time
import uuid

_RAND_A_BITS = 12
_RAND_B_BITS = 62
_BLOCK_BYTES = 4096


class _RandomBlock(threading.local):
    """This thread's block of ``os.urandom`` output and how much of it is used."""

    def __init__(self) -> None:
        self.block = b""
        self.used = 0


_random = _RandomBlock()


def _forget_block() -> None:
    """A forked child must not hand out the bytes its parent hands out too."""
    _random.block, _random.used = b"", 0


os.register_at_fork(after_in_child=_forget_block)


def random_bytes(count: int) -> bytes:
    """``count`` bytes from the operating system's secure random source, as ``os.urandom``."""
    pool = _random
    start = pool.used
    if start + count > len(pool.block):
        pool.block, start = os.urandom(max(_BLOCK_BYTES, count)), 0
    pool.used = start + count
    return pool.block[start : start + count]


def new_id() -> uuid.UUID:
    """A new version 7 UUID: 48 bits of Unix time in ms, the version, 74 random bits."""
    milliseconds = time.time_ns() // 1_000_000
    rand = int.from_bytes(random_bytes(10), "big")
    rand_a = rand >> (80 - _RAND_A_BITS)
    rand_b = rand & ((1 << _RAND_B_BITS) - 1)
    value = (
        (milliseconds & ((1 << 48) - 1)) << 80
        | 0x7 << 76
        | rand_a << 64
        | 0b10 << 62  # the RFC 4122/9562 variant
        | rand_b
    )
    return uuid.UUID(int=value)
