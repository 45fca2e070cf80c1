"""Load shedding over real HTTP: with one request in flight and a limit of one, the next is
answered 503 with ``Retry-After`` at once, the health endpoints still answer, and the process
admits again once the request in flight is done."""

from __future__ import annotations

import socket
from collections.abc import Iterator

import httpx
import pytest

from kuitti.services import Services
from tests.conftest import LiveServer, free_port

SOCKET_TIMEOUT_SECONDS = 60  # a bound for a server that never answers, not a measured time


@pytest.fixture
def one_at_a_time(services: Services) -> Iterator[LiveServer]:
    settings = services.settings.model_copy(update={"max_requests_in_flight": 1})
    with LiveServer(
        Services(settings=settings, db=services.db, clock=services.clock), free_port()
    ) as server:
        yield server


def test_the_excess_is_answered_503_at_once(one_at_a_time: LiveServer) -> None:
    port = int(one_at_a_time.url.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=SOCKET_TIMEOUT_SECONDS) as held:
        # The server asks for the body (100 Continue) only once the request is admitted and
        # its body is being read: from then on it is in flight until the body ends.
        held.sendall(
            b"POST /api/v1/receipts/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
            b"Content-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
        )
        assert held.recv(4096).startswith(b"HTTP/1.1 100 ")
        with httpx.Client(base_url=one_at_a_time.url, timeout=30) as http:
            shed = http.get("/api/v1/receipts/")
            assert shed.status_code == 503
            assert shed.headers["retry-after"] == "1"
            assert shed.json() == {
                "error": "service_unavailable",
                "decription": "The service is busier than it can serve; nothing was done. "
                "Try again shortly.",
            }
            assert http.get("/healthz").json() == {"status": "ok"}
            assert http.get("/readyz").status_code == 200
            held.sendall(b"{}")
            answer = b""
            while b"\r\n\r\n" not in answer:
                answer += held.recv(4096)
            assert answer.startswith(b"HTTP/1.1 401 ")  # handled: no key was sent
            assert http.get("/api/v1/receipts/").status_code == 401
