"""Requests the HTTP parser itself refuses, sent to a real ``kuitti serve`` over raw sockets:
400 in the service's error shape (``kuitti.protocols``), not uvicorn's plain text."""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import orjson
import uvicorn

from kuitti.app import create_app
from kuitti.protocols import H11JsonErrors
from kuitti.services import Services
from tests.conftest import free_port
from tests.test_serve import start, stop, wait_ready

MALFORMED = {
    "NUL in the URL": b"GET /healthz\x00 HTTP/1.1\r\nHost: k\r\n\r\n",
    "0xFF in the URL": b"GET /healthz\xff HTTP/1.1\r\nHost: k\r\n\r\n",
    "NUL in a header": b"GET /healthz HTTP/1.1\r\nHost: k\r\nX-A: a\x00b\r\n\r\n",
    "0xFF in a header name": b"GET /healthz HTTP/1.1\r\nHost: k\r\nX-\xff: a\r\n\r\n",
    "a bad Content-Length": (
        b"POST /api/v1/receipts/ HTTP/1.1\r\nHost: k\r\nContent-Length: x\r\n\r\n"
    ),
    "two Content-Lengths": (
        b"POST /api/v1/receipts/ HTTP/1.1\r\nHost: k\r\nContent-Length: 1\r\n"
        b"Content-Length: 2\r\n\r\n{}"
    ),
    "a URL of 64 KB": b"GET /healthz?" + b"a" * 65536 + b" HTTP/1.1\r\nHost: k\r\n\r\n",
}


def exchange(port: int, request: bytes) -> bytes:
    """Send ``request`` and read the answer until the server closes the connection."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as conn:
        conn.sendall(request)
        answer = b""
        while chunk := conn.recv(65536):
            answer += chunk
    return answer


def test_the_parsers_refusals_answer_in_the_error_shape(
    serve: tuple[str, dict[str, str], list[str]], tmp_path: Path, services: Services
) -> None:
    url, env, args = serve
    env["KUITTI_DATABASE_URL"] = services.settings.database_url or ""
    env["KUITTI_SECRET_KEY"] = "a-key-for-this-test-of-malformed-requests"
    # Above the parser's own limit, so that the 64 KB URL reaches it (a smaller head limit
    # answers 431 first: tests/test_request_limits.py).
    env["KUITTI_MAX_HEADER_BYTES"] = str(1 << 20)
    process, log = start(args, env, tmp_path)
    try:
        wait_ready(url, process, log)
        port = int(url.rsplit(":", 1)[1])
        answers = {name: exchange(port, request) for name, request in MALFORMED.items()}
    finally:
        stop(process)
    assert_error_shaped(answers)


def assert_error_shaped(answers: dict[str, bytes]) -> None:
    for name, answer in answers.items():
        head, _, body = answer.partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 400 "), (name, answer[:200])
        assert b"content-type: application/json" in head.lower(), (name, head)
        assert orjson.loads(body) == {
            "error": "bad_request",
            "decription": "Invalid HTTP request received.",
        }, name


def test_the_h11_protocol_answers_alike(services: Services) -> None:
    """For a deployment that runs h11 (``--http kuitti.protocols:H11JsonErrors``)."""
    app = create_app(services.settings, db=services.db, clock=services.clock)
    port = free_port()
    config = uvicorn.Config(
        app, host="127.0.0.1", port=port, log_level="critical", http=H11JsonErrors
    )
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    try:
        ready = threading.Event()
        for _ in range(500):  # uvicorn sets .started once it listens
            if server.started:
                break
            ready.wait(0.01)
        assert server.started
        h11_refuses = {k: v for k, v in MALFORMED.items() if k != "a URL of 64 KB"}
        assert_error_shaped({name: exchange(port, req) for name, req in h11_refuses.items()})
    finally:
        server.should_exit = True
        thread.join(timeout=10)
