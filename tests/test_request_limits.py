"""The limits ``kuitti serve`` puts on a request's head and on the time to send it, over real
sockets: a head too large is 431, a head or body too slow is 408, both in the error shape."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import orjson
import pytest

from kuitti.services import Services
from tests.test_serve import serving

MAX_HEADER_BYTES = 8192
# A bound for a test that would otherwise wait for ever on a server that never answers.
SOCKET_TIMEOUT_SECONDS = 60


@pytest.fixture(scope="module")
def address(
    tmp_path_factory: pytest.TempPathFactory, session_services: Services
) -> Iterator[tuple[str, int]]:
    settings = {
        "KUITTI_MAX_HEADER_BYTES": str(MAX_HEADER_BYTES),
        "KUITTI_HEADER_TIMEOUT_SECONDS": "1",
        "KUITTI_BODY_TIMEOUT_SECONDS": "1",
    }
    with serving(tmp_path_factory.mktemp("serve"), session_services, settings) as (_, url):
        yield ("127.0.0.1", int(url.rsplit(":", 1)[1]))


def exchange(address: tuple[str, int], request: bytes) -> tuple[int, dict[str, object]]:
    """Sends ``request`` (complete or not) and reads until the server closes the connection."""
    with socket.create_connection(address, timeout=SOCKET_TIMEOUT_SECONDS) as sock:
        sock.sendall(request)
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), orjson.loads(body) if body.startswith(b"{") else {}


def get(headers: bytes = b"", *, end: bool = True) -> bytes:
    return (
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        + headers
        + (b"\r\n" if end else b"")
    )


def test_a_head_within_the_limit_is_served(address: tuple[str, int]) -> None:
    cookie = b"Cookie: c=" + b"a" * (MAX_HEADER_BYTES - 200) + b"\r\n"
    assert exchange(address, get(cookie)) == (200, {"status": "ok"})


def test_a_finished_head_over_the_limit_is_431(address: tuple[str, int]) -> None:
    status, body = exchange(address, get(b"X-Big: " + b"a" * (MAX_HEADER_BYTES * 3) + b"\r\n"))
    assert status == 431
    assert body["error"] == "header_too_large"


def test_a_header_that_never_ends_is_431(address: tuple[str, int]) -> None:
    status, body = exchange(address, get(b"X-Big: " + b"a" * (MAX_HEADER_BYTES * 4), end=False))
    assert status == 431
    assert body["error"] == "header_too_large"


def test_a_head_that_never_finishes_is_408(address: tuple[str, int]) -> None:
    status, body = exchange(address, get(b"X-Slow: 1\r\n", end=False))
    assert status == 408
    assert body == {
        "error": "request_timeout",
        "decription": "The request's headers took too long to arrive.",
    }


def test_a_silent_connection_is_closed(address: tuple[str, int]) -> None:
    with socket.create_connection(address, timeout=SOCKET_TIMEOUT_SECONDS) as sock:
        assert sock.recv(65536).startswith(b"HTTP/1.1 408 ")


def test_a_body_that_never_finishes_is_408(address: tuple[str, int]) -> None:
    request = (
        b"POST /api/v1/receipts/ HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json"
        b'\r\nContent-Length: 1000\r\n\r\n{"receipt'
    )
    status, body = exchange(address, request)
    assert status == 408
    assert body["decription"] == "The request's body took too long to arrive."
