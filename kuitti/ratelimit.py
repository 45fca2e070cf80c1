"""Limits on receipt-link requests, counted in process memory on the injected clock.

- ``RateLimiter``: link page views per client (``KUITTI_LINK_RATE_LIMIT_PER_MINUTE``).
- ``LinkMisses``: link lookups that found nothing, per client and per namespace
  (``KUITTI_LINK_MISS_LIMIT_PER_CLIENT``, ``KUITTI_LINK_MISS_LIMIT_PER_NAMESPACE``): someone
  guessing a merchant's identifiers misses far more often than a person with a real link, so
  misses are what give the guessing away (docs/security.md, "Namespace links").

Fixed one-minute windows. This is a brake on guessing links and scraping, not an accounting
system: with several server processes each counts on its own, so a client may get up to N
times the limit across N processes (put a shared limit in the load balancer when that matters).
Memory stays bounded: a new window forgets the old one.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from enum import StrEnum

WINDOW_SECONDS = 60
# Past this many distinct keys in one window, the oldest window is dropped early.
MAX_CLIENTS_PER_WINDOW = 100_000


def seconds_left(now_seconds: float) -> int:
    """Until the current window ends (at least 1): the ``Retry-After`` of a refusal."""
    window = int(now_seconds // WINDOW_SECONDS)
    return max(1, (window + 1) * WINDOW_SECONDS - int(now_seconds))


@dataclass
class RateLimiter:
    limit_per_window: int
    _window: int = -1
    _counts: dict[str, int] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def hit(self, client: str, now_seconds: float) -> int | None:
        """Count one request; None when allowed, else the seconds until the window ends."""
        if self.add(client, now_seconds) <= self.limit_per_window:
            return None
        return seconds_left(now_seconds)

    def add(self, key: str, now_seconds: float, amount: int = 1) -> int:
        """Count ``amount`` for ``key`` in the current window; its count after that."""
        window = int(now_seconds // WINDOW_SECONDS)
        with self._lock:
            if window != self._window or len(self._counts) >= MAX_CLIENTS_PER_WINDOW:
                self._window, self._counts = window, {}
            count = self._counts.get(key, 0) + amount
            if amount:
                self._counts[key] = count
        return count

    def reached(self, key: str, now_seconds: float) -> bool:
        """Whether ``key`` has counted up to the limit in the current window."""
        return self.add(key, now_seconds, 0) >= self.limit_per_window

    def clear(self) -> None:
        with self._lock:
            self._window, self._counts = -1, {}


class BurstScope(StrEnum):
    """What a burst of link misses came from: one client, or one namespace across clients."""

    CLIENT = "client"
    NAMESPACE = "namespace"


@dataclass
class LinkMisses:
    """Link lookups that found nothing (404), per client and per namespace.

    A client with ``per_client`` misses in a window may look up no link until it ends. A
    namespace with ``per_namespace`` misses in a window (guessing spread over many addresses)
    is closed until it ends to every client that has missed in it; a client that has not
    missed, a customer with a real link, still sees its receipt."""

    per_client: int
    per_namespace: int
    clients: RateLimiter = field(init=False)
    namespaces: RateLimiter = field(init=False)

    def __post_init__(self) -> None:
        self.clients = RateLimiter(self.per_client)
        self.namespaces = RateLimiter(self.per_namespace)

    @staticmethod
    def _key(namespace: str | None) -> str | None:
        # A namespace name has at most 63 characters; a longer one is counted by its start,
        # so a key's size is bounded whatever the path.
        return namespace[:64] if namespace is not None else None

    def refused(self, client: str, namespace: str | None, now_seconds: float) -> int | None:
        """None when ``client`` may look up a link of ``namespace`` (None: a private link),
        else the seconds until the window ends."""
        if self.clients.reached(client, now_seconds):
            return seconds_left(now_seconds)
        namespace = self._key(namespace)
        guessing = namespace is not None and self.namespaces.reached(namespace, now_seconds)
        if guessing and self.clients.add(client, now_seconds, 0) > 0:
            return seconds_left(now_seconds)
        return None

    def missed(self, client: str, namespace: str | None, now_seconds: float) -> list[BurstScope]:
        """Count one miss; the bursts it starts (the miss that reaches a limit, once per
        window), which the caller reports."""
        bursts = []
        namespace = self._key(namespace)
        if self.clients.add(client, now_seconds) == self.per_client:
            bursts.append(BurstScope.CLIENT)
        if namespace is not None and self.namespaces.add(namespace, now_seconds) == (
            self.per_namespace
        ):
            bursts.append(BurstScope.NAMESPACE)
        return bursts

    def clear(self) -> None:
        self.clients.clear()
        self.namespaces.clear()
