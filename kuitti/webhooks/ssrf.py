"""Where the worker may send a webhook: server-side request forgery protection.

A partner's webhook URL is partner-controlled, so the worker would otherwise be a way to reach
the service's own network. Unless ``KUITTI_WEBHOOK_ALLOW_INSECURE`` is set, a target must be
``https`` and every address its host resolves to must be public (not loopback, private,
link-local, multicast, reserved, unspecified or shared address space). The worker then connects
to the address it checked, not to the name: a DNS answer that changes between the check and the
connection (DNS rebinding) cannot redirect it. TLS still verifies the certificate against the
host name (SNI), and the ``Host`` header carries the name.
"""

from __future__ import annotations

import asyncio
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit, urlunsplit

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
DNS_CACHE_SECONDS = 30.0
DNS_CACHE_MAX_HOSTS = 1024


class TargetRefused(Exception):
    """The webhook URL points where the worker must not connect."""


@dataclass(frozen=True)
class Target:
    """What the HTTP client should connect to for one webhook URL."""

    url: str
    host_header: str | None = None
    sni_hostname: str | None = None


# NAT64 prefixes (RFC 6052, RFC 8215): the IPv6 address carries the IPv4 one the translator
# connects to. The well-known prefix embeds it in the last 32 bits; the local-use prefix may be
# used with any of the RFC 6052 lengths, so every possible position is checked there.
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")
NAT64_LOCAL_USE = ipaddress.IPv6Network("64:ff9b:1::/48")
# RFC 6052 §2.2: where the IPv4 bytes sit for the /96, /64, /56 and /48 prefix lengths (byte 8,
# the "u" octet, is always skipped).
NAT64_EMBEDDINGS = ((12, 13, 14, 15), (9, 10, 11, 12), (7, 9, 10, 11), (6, 7, 9, 10))


def embedded_ipv4(address: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses a transition address really reaches: IPv4-mapped, 6to4 (2002::/16),
    Teredo (2001::/32: server and client) and NAT64. Empty for a plain IPv6 address."""
    if address.ipv4_mapped is not None:
        return [address.ipv4_mapped]
    if address.sixtofour is not None:
        return [address.sixtofour]
    if address.teredo is not None:
        return list(address.teredo)
    packed = address.packed
    if address in NAT64_WELL_KNOWN:
        return [ipaddress.IPv4Address(packed[12:])]
    if address in NAT64_LOCAL_USE:
        return [ipaddress.IPv4Address(bytes(packed[i] for i in at)) for at in NAT64_EMBEDDINGS]
    return []


def refusal_reason(address: IPAddress) -> str | None:
    """Why a webhook may not go to this address, or None when it is a public address.

    An IPv6 address that wraps an IPv4 one (IPv4-mapped, 6to4, Teredo, NAT64) is judged by what
    it wraps: ``2002:a9fe:a9fe::`` reaches 169.254.169.254 through a 6to4 relay."""
    if isinstance(address, ipaddress.IPv6Address):
        wrapped = embedded_ipv4(address)
        if wrapped:
            reasons = [_plain_refusal_reason(inner) for inner in wrapped]
            refused = next((reason for reason in reasons if reason is not None), None)
            return f"{refused} (wrapped in {address})" if refused else None
    return _plain_refusal_reason(address)


def _plain_refusal_reason(address: IPAddress) -> str | None:
    for flag, name in (
        (address.is_loopback, "a loopback"),
        (address.is_link_local, "a link-local"),
        (address.is_multicast, "a multicast"),
        (address.is_unspecified, "an unspecified"),
        (address.is_reserved, "a reserved"),
        (address.is_private, "a private"),
        (not address.is_global, "a non-public"),
    ):
        if flag:
            return f"{address} is {name} address"
    return None


class TargetGuard:
    """Resolves and checks webhook targets; keeps DNS answers for a short while."""

    def __init__(self, *, allow_insecure: bool) -> None:
        self.allow_insecure = allow_insecure
        self._cache: dict[tuple[str, int], tuple[float, list[IPAddress]]] = {}

    async def target(self, url: str) -> Target:
        if self.allow_insecure:
            return Target(url)
        parts = urlsplit(url)
        if parts.scheme != "https":
            raise TargetRefused(
                f"refused {url!r}: webhook URLs must be https "
                "(KUITTI_WEBHOOK_ALLOW_INSECURE=true allows http in development)"
            )
        host = parts.hostname
        if not host:
            raise TargetRefused(f"refused {url!r}: no host")
        port = parts.port or 443
        addresses = await self._resolve(host, port)
        for address in addresses:
            reason = refusal_reason(address)
            if reason is not None:
                raise TargetRefused(
                    f"refused {url!r}: {reason} (KUITTI_WEBHOOK_ALLOW_INSECURE=true allows it "
                    "in development)"
                )
        chosen = addresses[0]
        literal = f"[{chosen}]" if chosen.version == 6 else str(chosen)
        netloc = f"{literal}:{port}"
        host_header = host if parts.port is None else f"{host}:{parts.port}"
        if ":" in host:  # an IPv6 literal in the URL itself
            host_header = f"[{host}]" if parts.port is None else f"[{host}]:{parts.port}"
        pinned = urlunsplit(("https", netloc, parts.path or "/", parts.query, ""))
        return Target(pinned, host_header=host_header, sni_hostname=host)

    async def _resolve(self, host: str, port: int) -> list[IPAddress]:
        try:
            return [ipaddress.ip_address(host)]
        except ValueError:
            pass
        now = time.monotonic()
        cached = self._cache.get((host, port))
        if cached is not None and cached[0] > now:
            return cached[1]
        loop = asyncio.get_running_loop()
        try:
            infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except OSError as exc:
            raise OSError(f"could not resolve {host!r}: {exc}") from exc
        addresses: list[IPAddress] = []
        for _family, _type, _proto, _canon, sockaddr in infos:
            address = ipaddress.ip_address(str(sockaddr[0]).split("%", 1)[0])
            if address not in addresses:
                addresses.append(address)
        if not addresses:
            raise OSError(f"could not resolve {host!r}: no addresses")
        if len(self._cache) >= DNS_CACHE_MAX_HOSTS:
            self._cache.clear()
        self._cache[(host, port)] = (now + DNS_CACHE_SECONDS, addresses)
        return addresses
