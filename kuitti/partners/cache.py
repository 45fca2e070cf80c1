"""A short-lived, per-process cache of authenticated partners.

Looking the key up is a quarter of the work of a small request; partners change only through the
operator command line, so a process may trust a successful lookup for a few seconds. Only
successes are kept: a new key works at once, and a wrong key always asks the database.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict

from kuitti.models import Partner

PARTNER_CACHE_SECONDS = 10.0
PARTNER_CACHE_SIZE = 1024


class PartnerCache:
    def __init__(
        self, ttl_seconds: float = PARTNER_CACHE_SECONDS, size: int = PARTNER_CACHE_SIZE
    ) -> None:
        self._ttl = ttl_seconds
        self._size = size
        self._entries: OrderedDict[str, tuple[float, Partner]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key_digest: str) -> Partner | None:
        with self._lock:
            entry = self._entries.get(key_digest)
            if entry is None:
                return None
            expires, partner = entry
            if expires < time.monotonic():
                del self._entries[key_digest]
                return None
            self._entries.move_to_end(key_digest)
            return partner

    def put(self, key_digest: str, partner: Partner) -> None:
        with self._lock:
            self._entries[key_digest] = (time.monotonic() + self._ttl, partner)
            self._entries.move_to_end(key_digest)
            while len(self._entries) > self._size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
