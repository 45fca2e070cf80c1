"""Server-side request forgery: where the worker refuses to send (unless insecure is allowed)."""

from __future__ import annotations

import asyncio
import ipaddress

import pytest

from kuitti.models.outbox import DeliveryStatus
from kuitti.services import Services
from kuitti.webhooks.ssrf import Target, TargetGuard, TargetRefused, refusal_reason
from tests.webhooks.receivers import Receiver
from tests.webhooks.support import deliver, delivery, queue, webhook_partner, with_settings


def target(url: str, *, allow_insecure: bool = False) -> Target:
    return asyncio.run(TargetGuard(allow_insecure=allow_insecure).target(url))


class TestRefusalReason:
    @pytest.mark.parametrize(
        ("address", "kind"),
        [
            ("127.0.0.1", "loopback"),
            ("127.8.9.10", "loopback"),
            ("::1", "loopback"),
            ("10.1.2.3", "private"),
            ("172.16.0.1", "private"),
            ("192.168.1.1", "private"),
            ("fd00::1", "private"),
            ("169.254.169.254", "link-local"),
            ("fe80::1", "link-local"),
            ("224.0.0.1", "multicast"),
            ("0.0.0.0", "unspecified"),
            ("240.0.0.1", "reserved"),
            ("100.64.0.1", "non-public"),
            ("::ffff:127.0.0.1", "loopback"),
            ("::ffff:10.0.0.1", "private"),
            # 6to4 (2002::/16) wrapping the cloud metadata address, and a private one
            ("2002:a9fe:a9fe::", "169.254.169.254 is a link-local"),
            ("2002:0a00:0001::1", "10.0.0.1 is a private"),
            # Teredo (2001::/32): server 65.54.227.120, client 10.0.0.1 (stored inverted)
            ("2001:0:4136:e378:8000:63bf:f5ff:fffe", "10.0.0.1 is a private"),
            # NAT64, the well-known prefix and the local-use one
            ("64:ff9b::7f00:1", "127.0.0.1 is a loopback"),
            ("64:ff9b::a9fe:a9fe", "169.254.169.254 is a link-local"),
            ("64:ff9b:1::a9fe:a9fe", "169.254.169.254 is a link-local"),
            # a /48 local-use prefix: every position the IPv4 address may take is checked
            ("64:ff9b:1:a9fe:a9:fe00::", "(wrapped in 64:ff9b:1:a9fe:a9:fe00::)"),
        ],
    )
    def test_refused(self, address: str, kind: str) -> None:
        reason = refusal_reason(ipaddress.ip_address(address))
        assert reason is not None
        assert kind in reason

    @pytest.mark.parametrize(
        "address",
        [
            "93.184.215.14",
            "1.1.1.1",
            "2606:4700::1111",
            "2002:5db8:d70e::1",  # 6to4 of 93.184.215.14
            "64:ff9b::5db8:d70e",  # NAT64 of 93.184.215.14
        ],
    )
    def test_public_allowed(self, address: str) -> None:
        assert refusal_reason(ipaddress.ip_address(address)) is None


class TestTargetGuard:
    def test_http_refused(self) -> None:
        with pytest.raises(TargetRefused, match="must be https"):
            target("http://93.184.215.14/hook")

    @pytest.mark.parametrize(
        "url",
        [
            "https://127.0.0.1:8443/hook",
            "https://localhost/hook",  # a name is resolved, and every address checked
            "https://[::1]/hook",
            "https://169.254.169.254/latest/meta-data",
            "https://10.0.0.7/hook",
        ],
    )
    def test_internal_targets_refused(self, url: str) -> None:
        with pytest.raises(TargetRefused, match="KUITTI_WEBHOOK_ALLOW_INSECURE"):
            target(url)

    def test_connects_to_the_checked_address(self) -> None:
        """The URL handed to the HTTP client carries the checked address (no second DNS
        lookup that could answer differently); Host and SNI keep the name."""
        got = target("https://93.184.215.14:8443/hooks/kuitti?x=1")
        assert got == Target(
            "https://93.184.215.14:8443/hooks/kuitti?x=1",
            host_header="93.184.215.14:8443",
            sni_hostname="93.184.215.14",
        )

    def test_insecure_allows_anything(self) -> None:
        url = "http://127.0.0.1:9/hook"
        assert target(url, allow_insecure=True) == Target(url)


class TestWorkerRefuses:
    def test_refused_target_is_a_failed_attempt_not_a_crash(self, services: Services) -> None:
        strict = with_settings(services, webhook_allow_insecure=False)
        with Receiver() as endpoint:
            plain = webhook_partner(services, endpoint.url, name="http")
            tls = webhook_partner(
                services, endpoint.url.replace("http://", "https://"), name="loopback"
            )
            plain_id = queue(services, plain)
            tls_id = queue(services, tls)
            assert deliver(strict) == 2
        assert endpoint.received == []
        plain_row = delivery(services, plain_id)
        tls_row = delivery(services, tls_id)
        assert plain_row.status == tls_row.status == DeliveryStatus.PENDING
        assert plain_row.attempts[0].status_code is None
        assert "must be https" in str(plain_row.attempts[0].error)
        assert "127.0.0.1 is a loopback address" in str(tls_row.attempts[0].error)
