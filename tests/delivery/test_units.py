"""Small units of the link pages: the rate limiter and the view cache."""

from __future__ import annotations

import uuid

import orjson

from kuitti.delivery.linkpage import LinkPage, _ViewCache
from kuitti.i18n import Language
from kuitti.ratelimit import RateLimiter
from kuitti.receipts.view import build_view
from tests.factories import receipt_doc


class TestRateLimiter:
    def test_counts_per_client_within_a_minute(self) -> None:
        limiter = RateLimiter(2)
        assert limiter.hit("a", 120.0) is None
        assert limiter.hit("a", 130.0) is None
        assert limiter.hit("a", 150.5) == 30  # seconds to the next window
        assert limiter.hit("b", 150.5) is None  # another client has its own count
        assert limiter.hit("a", 180.0) is None  # a new window

    def test_memory_is_bounded(self) -> None:
        limiter = RateLimiter(1)
        for i in range(1000):
            limiter.hit(f"client-{i}", 60.0)
        assert len(limiter._counts) == 1000
        limiter.hit("late", 120.0)
        assert len(limiter._counts) == 1


class TestViewCache:
    def test_least_recently_used_goes_first(self) -> None:

        cache = _ViewCache(2)
        view = build_view(orjson.dumps(receipt_doc()).decode())
        keys = [(uuid.uuid4(), Language.EN, "") for _ in range(3)]
        cache.put(keys[0], (view, []))
        cache.put(keys[1], (view, []))
        assert cache.get(keys[0]) is not None  # now the most recent
        cache.put(keys[2], (view, []))
        assert cache.get(keys[1]) is None
        assert cache.get(keys[0]) is not None
        assert cache.get(keys[2]) is not None


class TestLinkPagePaths:
    def test_paths_quote_and_keep_the_language(self) -> None:
        page = LinkPage("kauppa", "a/b c")
        assert page.path == "/ns/kauppa/r/a%2Fb%20c"
        assert page.page_path("sv") == "/ns/kauppa/r/a%2Fb%20c?lang=sv"
        assert page.page_path("xx", imported=True) == "/ns/kauppa/r/a%2Fb%20c?imported=1"
        assert page.pdf_path("fi") == "/ns/kauppa/r/a%2Fb%20c/pdf?lang=fi"
        assert LinkPage(None, "tok").path == "/r/tok"
