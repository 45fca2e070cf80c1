"""A per-client limit on receipt-link page views (``KUITTI_LINK_RATE_LIMIT_PER_MINUTE``).

Fixed one-minute windows counted in process memory, on the injected clock. This is a brake on
guessing links and scraping, not an accounting system: with several server processes each counts
on its own, so a client may get up to N times the limit across N processes (put a shared limit in
the load balancer when that matters). Memory stays bounded: a new window forgets the old one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

WINDOW_SECONDS = 60
# Past this many distinct clients in one window, the oldest window is dropped early.
MAX_CLIENTS_PER_WINDOW = 100_000


@dataclass
class RateLimiter:
    limit_per_window: int
    _window: int = -1
    _counts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hit(self, client: str, now_seconds: float) -> int | None:
        """Count one request; None when allowed, else the seconds until the window ends."""
        window = int(now_seconds // WINDOW_SECONDS)
        with self._lock:
            if window != self._window or len(self._counts) >= MAX_CLIENTS_PER_WINDOW:
                self._window, self._counts = window, {}
            count = self._counts.get(client, 0) + 1
            self._counts[client] = count
        if count <= self.limit_per_window:
            return None
        return max(1, (window + 1) * WINDOW_SECONDS - int(now_seconds))

    def clear(self) -> None:
        with self._lock:
            self._window, self._counts = -1, {}
