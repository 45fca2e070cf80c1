"""Bursts of receipt-link lookups that find nothing (docs/security.md, "Namespace links"): a
client or a namespace that reaches its miss limit is throttled with 429, and the burst is
logged at warning level and counted in ``kuitti_link_miss_bursts_total``."""

from __future__ import annotations

import logging
from collections.abc import Iterator

import httpx
import pytest
import structlog

from kuitti.clock import FrozenClock
from kuitti.delivery import routes
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.conftest import LiveServer, free_port
from tests.delivery.test_links import link_receipt, path_of
from tests.factories import metric
from tests.logcapture import captured_logs

CLIENT_BURSTS = 'kuitti_link_miss_bursts_total{scope="client"}'
NAMESPACE_BURSTS = 'kuitti_link_miss_bursts_total{scope="namespace"}'


@pytest.fixture
def limited(services: Services) -> Iterator[str]:
    """A server whose miss limits are 3 per client and 4 per namespace a minute."""
    settings = services.settings.model_copy(
        update={"link_miss_limit_per_client": 3, "link_miss_limit_per_namespace": 4}
    )
    with LiveServer(
        Services(settings=settings, db=services.db, clock=services.clock), free_port()
    ) as server:
        yield server.url


@pytest.fixture
def warnings(monkeypatch: pytest.MonkeyPatch) -> Iterator[structlog.testing.LogCapture]:
    with captured_logs(monkeypatch, routes, logging.WARNING) as capture:
        yield capture


def from_address(base_url: str, address: str) -> httpx.Client:
    """A client whose connections come from ``address`` (any 127.x address is loopback)."""
    return httpx.Client(base_url=base_url, transport=httpx.HTTPTransport(local_address=address))


class TestMissBursts:
    def test_a_client_that_keeps_missing_is_throttled_and_the_burst_is_reported(
        self,
        limited: str,
        clock: FrozenClock,
        merchant: NewPartner,
        client: httpx.Client,
        warnings: structlog.testing.LogCapture,
    ) -> None:
        created = link_receipt(client, merchant, "L-1")
        clock.set(clock.now().replace(second=0))
        bursts_before = metric(client, CLIENT_BURSTS)
        with from_address(limited, "127.0.0.2") as guesser:
            codes = [guesser.get(f"/ns/kauppa/r/till-{n}").status_code for n in range(3)]
            assert codes == [404, 404, 404]
            # Now even a real link is refused, and so is a private one.
            for path in ("/ns/kauppa/r/L-1", path_of(created["receipt_web_url"])):
                refused = guesser.get(path)
                assert refused.status_code == 429
                assert int(refused.headers["retry-after"]) == 60
                assert refused.headers["x-robots-tag"] == "noindex, nofollow"
            clock.advance(60)
            assert guesser.get("/ns/kauppa/r/L-1").status_code == 200
        assert metric(client, CLIENT_BURSTS) == bursts_before + 1
        assert [
            (line["log_level"], line["scope"], line["client"], line["namespace"])
            for line in warnings.entries
            if line["event"] == "receipt-link miss burst"
        ] == [("warning", "client", "127.0.0.2", "kauppa")]

    def test_misses_spread_over_many_clients_close_the_namespace_to_those_clients(
        self,
        limited: str,
        clock: FrozenClock,
        merchant: NewPartner,
        client: httpx.Client,
        warnings: structlog.testing.LogCapture,
    ) -> None:
        link_receipt(client, merchant, "L-1")
        clock.set(clock.now().replace(second=0))
        bursts_before = metric(client, NAMESPACE_BURSTS)
        guessers = [from_address(limited, f"127.0.0.{n}") for n in range(2, 6)]
        try:
            for n, guesser in enumerate(guessers):
                assert guesser.get(f"/ns/kauppa/r/till-{n}").status_code == 404
            # Each guesser missed once (under its own limit of 3), the namespace four times.
            assert guessers[0].get("/ns/kauppa/r/L-1").status_code == 429
            # Another namespace is still open to it.
            assert guessers[0].get("/ns/kauppa-2/r/anything").status_code == 404
            with from_address(limited, "127.0.0.9") as customer:
                assert customer.get("/ns/kauppa/r/L-1").status_code == 200
        finally:
            for guesser in guessers:
                guesser.close()
        assert metric(client, NAMESPACE_BURSTS) == bursts_before + 1
        assert [
            (line["scope"], line["client"], line["namespace"])
            for line in warnings.entries
            if line["event"] == "receipt-link miss burst"
        ] == [("namespace", "127.0.0.5", "kauppa")]

    def test_a_found_receipt_is_no_miss(
        self, limited: str, clock: FrozenClock, merchant: NewPartner, client: httpx.Client
    ) -> None:
        link_receipt(client, merchant, "L-1")
        clock.set(clock.now().replace(second=0))
        with from_address(limited, "127.0.0.7") as reader:
            codes = [reader.get("/ns/kauppa/r/L-1").status_code for _ in range(10)]
        assert codes == [200] * 10
