"""``Services``: what the running process shares — settings, database, clock and its caches.

Built once per process (``create_app``, the command line, the worker) and handed to domain code as
a plain argument; the web layer reaches it through ``deps.ServicesDep``. It lives apart from
``deps.py`` so that domain code never imports FastAPI.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kuitti.clock import Clock
from kuitti.config import Settings
from kuitti.db import Database
from kuitti.ratelimit import LinkMisses, RateLimiter
from kuitti.replicas import ReadReplica


@dataclass(frozen=True)
class Services:
    """Every process-level cache lives here, so that one object says what a process remembers.

    Memos of pure functions stay next to their function instead (rendered receipt bytes in
    ``receipts/formats/rendering.py``, the link page's view models, ``lru_cache`` on parsers):
    each is keyed by everything its result depends on, so it is never stale and no process
    needs to configure, share or reset it."""

    settings: Settings
    db: Database
    clock: Clock
    replica: ReadReplica | None = None
    """The read replica, when ``KUITTI_READ_DATABASE_URL`` names one (``kuitti/replicas.py``)."""
    link_rate_limiter: RateLimiter = field(init=False, compare=False)
    link_misses: LinkMisses = field(init=False, compare=False)

    def __post_init__(self) -> None:
        # The limits come from the settings; frozen, so set once here rather than by the caller.
        limiter = RateLimiter(self.settings.link_rate_limit_per_minute)
        object.__setattr__(self, "link_rate_limiter", limiter)
        misses = LinkMisses(
            self.settings.link_miss_limit_per_client, self.settings.link_miss_limit_per_namespace
        )
        object.__setattr__(self, "link_misses", misses)
