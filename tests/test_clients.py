"""The client address the throttles count by, through a real ``kuitti serve``: a forwarded
header is believed only from a peer in ``KUITTI_TRUSTED_PROXIES``."""

from __future__ import annotations

import itertools
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from kuitti.services import Services
from kuitti.users.service import MAX_FAILURES_PER_CLIENT
from tests.conftest import BACKEND
from tests.oauth.flow import csrf_of
from tests.test_serve import start, stop, wait_ready

LINK_LIMIT = 3
_addresses = (f"198.51.100.{n}" for n in itertools.count(1))


def rotating() -> dict[str, str]:
    """A new forwarded address on every call, as a client that lies about itself sends."""
    return {"X-Forwarded-For": next(_addresses)}


def served(
    serve: tuple[str, dict[str, str], list[str]],
    tmp_path: Path,
    services: Services,
    trusted: str,
) -> Iterator[str]:
    url, env, args = serve
    env["KUITTI_LINK_RATE_LIMIT_PER_MINUTE"] = str(LINK_LIMIT)
    env["KUITTI_TRUSTED_PROXIES"] = trusted
    if BACKEND == "postgresql":
        env["KUITTI_DATABASE_URL"] = services.settings.database_url or ""
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        yield url
    finally:
        stop(process)


@pytest.fixture
def untrusted(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path, services: Services
) -> Iterator[str]:
    yield from served(serve, tmp_path, services, "")


@pytest.fixture
def behind_proxy(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path, services: Services
) -> Iterator[str]:
    yield from served(serve, tmp_path, services, "127.0.0.1/32, ::1")


def link_codes(http: httpx.Client, tries: int, forwarded: bool) -> list[int]:
    return [
        http.get(f"/ns/nowhere/r/guess-{n}", headers=rotating() if forwarded else {}).status_code
        for n in range(tries)
    ]


def failed_logins(http: httpx.Client, tries: int, forwarded: bool) -> list[int]:
    token = csrf_of(http.get("/login"))
    codes = []
    for n in range(tries):
        answer = http.post(
            "/login",
            data={"email": f"nobody{n}@example.com", "password": "wrong", "csrf_token": token},
            headers=rotating() if forwarded else {},
        )
        codes.append(answer.status_code)
    return codes


def test_a_forwarded_address_from_a_client_is_ignored(untrusted: str) -> None:
    with httpx.Client(base_url=untrusted, timeout=30) as http:
        links = link_codes(http, LINK_LIMIT * 3, forwarded=True)
        logins = failed_logins(http, MAX_FAILURES_PER_CLIENT + 2, forwarded=True)
    # The limits hold per real peer: within one minute at most LINK_LIMIT pass (two windows
    # at the most if the minute turns during the loop).
    assert links.count(429) >= LINK_LIMIT, links
    assert logins.count(429) == 2, logins
    assert set(logins[:MAX_FAILURES_PER_CLIENT]) == {400}, logins


def test_a_configured_proxy_forwards_the_client_address(behind_proxy: str) -> None:
    with httpx.Client(base_url=behind_proxy, timeout=30) as http:
        assert 429 not in link_codes(http, LINK_LIMIT * 3, forwarded=True)
        assert 429 in link_codes(http, LINK_LIMIT * 3, forwarded=False)
        logins = failed_logins(http, MAX_FAILURES_PER_CLIENT + 2, forwarded=True)
    assert set(logins) == {400}, logins
