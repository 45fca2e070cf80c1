"""Load shedding by the requests in flight (``kuitti.edge``, ``kuitti.admission``), over real
HTTP to a real ``kuitti serve``: with as many requests in flight as the process may have, the
next is answered 503 with ``Retry-After`` at once, the health endpoints still answer, and the
process admits again once a request in flight is done; the refusals are counted, and logged
once for a burst of them. A request is held in flight by a body it has not finished sending,
so which way each request goes depends on the bound, not on how fast the host runs."""

from __future__ import annotations

import asyncio
import contextlib
import math
import re
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
import uvicorn
from prometheus_client import REGISTRY
from uvicorn._types import ASGIReceiveCallable as Receive
from uvicorn._types import ASGISendCallable as Send
from uvicorn._types import Scope

from kuitti import admission, edge
from kuitti.admission import Refusals
from kuitti.db import READ_BY
from kuitti.protocols import HTTP_PROTOCOL
from kuitti.services import Services
from tests.logcapture import captured_logs
from tests.test_serve import serving

SOCKET_TIMEOUT_SECONDS = 60  # a bound for a server that never answers, not a measured time
BUSY = {
    "error": "service_unavailable",
    "decription": "The service is busier than it can serve; nothing was done. Try again shortly.",
}


def held_in_flight(url: str) -> socket.socket:
    """A post admitted and in flight: the server asks for its body (100 Continue) only once the
    request is taken up, and it stays in flight until the body ends."""
    held = socket.create_connection(
        ("127.0.0.1", int(url.rsplit(":", 1)[1])), timeout=SOCKET_TIMEOUT_SECONDS
    )
    held.sendall(
        b"POST /api/v1/receipts/ HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        b"Content-Type: application/json\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
    )
    return held


def first_line(sock: socket.socket) -> bytes:
    answer = b""
    while b"\r\n" not in answer:
        chunk = sock.recv(4096)
        assert chunk, answer
        answer += chunk
    return answer.split(b"\r\n", 1)[0]


def test_the_excess_is_answered_503_at_once(tmp_path: Path, session_services: Services) -> None:
    settings = {"KUITTI_MAX_REQUESTS_IN_FLIGHT": "1"}
    with (
        serving(tmp_path, session_services, settings, "--no-worker") as (_process, url),
        held_in_flight(url) as held,
        httpx.Client(base_url=url, timeout=SOCKET_TIMEOUT_SECONDS) as http,
    ):
        assert first_line(held) == b"HTTP/1.1 100 Continue"
        for _ in range(3):
            shed = http.get("/api/v1/receipts/")
            assert shed.status_code == 503
            assert shed.headers["retry-after"] == "1"
            assert shed.headers["connection"] == "close"
            assert shed.json() == BUSY
        assert http.get("/healthz").json() == {"status": "ok"}
        assert http.get("/readyz").status_code == 200
        held.sendall(b"{}")
        answer = b""
        while b"401 " not in answer:
            chunk = held.recv(4096)
            assert chunk, answer
            answer += chunk
        # Its task ends just after its answer: the process admits again then.
        deadline = time.monotonic() + SOCKET_TIMEOUT_SECONDS
        while (status := http.get("/api/v1/receipts/").status_code) == 503:
            assert time.monotonic() < deadline
        assert status == 401
        metrics = http.get("/metrics").text
    counted = re.search(r'route="shed",status="503"} (\d+)', metrics)
    assert counted is not None
    assert int(counted.group(1)) >= 3
    # Three refusals, one log line: the first, with its count.
    lines = [
        line
        for line in (tmp_path / "serve.log").read_text().splitlines()
        if "requests shed" in line
    ]
    assert len(lines) == 1
    assert '"refused":1' in lines[0]


def test_refusals_are_logged_once_per_interval_with_their_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    refusals = Refusals(every=10.0)
    with captured_logs(monkeypatch, admission) as logs:
        for step in range(100):  # one a tenth of a second
            refusals.refused("GET", "queue", now=1000.0 + step / 10)
        refusals.refused("POST", "in flight", now=1010.05)
    assert [(entry["event"], entry["refused"]) for entry in logs.entries] == [
        ("requests shed", 1),
        ("requests shed", 100),
    ]
    assert logs.entries[1]["last_reason"] == "in flight"
    assert logs.entries[1]["seconds"] == 10


def whole_answer(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes the connection."""
    answer = b""
    with sock:
        while chunk := sock.recv(65536):
            answer += chunk
    return answer


def test_while_shedding_only_a_whole_plain_head_is_refused_from_its_first_bytes(
    tmp_path: Path, session_services: Services
) -> None:
    """While the process is at its bound it takes new connections with the cheap refusing
    protocol (``kuitti.edge.Refusing``); what that cannot judge from the first bytes goes to the
    full protocol, which decides as for any request: a head sent in two pieces is still refused
    503, a health check with a query is answered, a request line no parser accepts gets the 400
    of the error shape (and no label of its own in the count)."""
    settings = {"KUITTI_MAX_REQUESTS_IN_FLIGHT": "1"}
    with (
        serving(tmp_path, session_services, settings, "--no-worker") as (_process, url),
        held_in_flight(url) as held,
    ):
        assert first_line(held) == b"HTTP/1.1 100 Continue"
        address = ("127.0.0.1", int(url.rsplit(":", 1)[1]))

        def sent(*pieces: bytes) -> bytes:
            sock = socket.create_connection(address, timeout=SOCKET_TIMEOUT_SECONDS)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            for piece in pieces:  # read in one go or not, the answer is the same
                sock.sendall(piece)
            return whole_answer(sock)

        whole = sent(b"GET /api/v1/receipts/ HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert whole.startswith(b"HTTP/1.1 503 ")
        assert whole.endswith(orjson.dumps(BUSY))
        pieces = sent(b"GET /api/v1/receipts/ HTTP/1.1\r\nHo", b"st: 127.0.0.1\r\n\r\n")
        assert pieces == whole
        health = sent(
            b"GET /healthz?probe=1 HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        assert health.startswith(b"HTTP/1.1 200 ")
        assert health.endswith(b'{"status":"ok"}')
        odd = sent(b"G\x01T / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        assert odd.startswith(b"HTTP/1.1 400 ")
        assert orjson.loads(odd.partition(b"\r\n\r\n")[2])["error"] == "bad_request"
        metrics = httpx.get(f"{url}/metrics", timeout=SOCKET_TIMEOUT_SECONDS).text
    shed = re.findall(r'kuitti_http_requests_total\{method="([^"]*)",route="shed"', metrics)
    assert shed == ["GET"]
    counted = re.search(r'method="GET",route="shed",status="503"} (\d+)', metrics)
    assert counted is not None
    assert int(counted.group(1)) == 2


@contextlib.contextmanager
def serving_in_thread(app: Any) -> Iterator[httpx.Client]:
    """``app`` served in this process by uvicorn with ``kuitti serve``'s protocol, on a thread
    of its own; a client of it."""
    listening = socket.create_server(("127.0.0.1", 0))
    port = listening.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(app, http=HTTP_PROTOCOL, lifespan="off", log_level="error")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [listening]})
    thread.start()
    try:
        with httpx.Client(
            base_url=f"http://127.0.0.1:{port}", timeout=SOCKET_TIMEOUT_SECONDS
        ) as http:
            deadline = time.monotonic() + SOCKET_TIMEOUT_SECONDS
            while not server.started:
                assert time.monotonic() < deadline, "the server never started"
                time.sleep(0.01)
            yield http
    finally:
        server.should_exit = True
        thread.join(SOCKET_TIMEOUT_SECONDS)


async def answer_ok(send: Send) -> None:
    headers = [(b"content-type", b"text/plain")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": b"ok"})


def test_a_request_answered_is_out_of_flight_while_its_task_goes_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A request counts in flight until its response is sent, not until its task ends: the
    task of an application with work after its answer lives on, while the client's next
    request on the same connection arrives. With one request allowed in flight, a keep-alive
    client is served request after request, each task still held after its answer."""
    monkeypatch.setenv("KUITTI_MAX_REQUESTS_IN_FLIGHT", "1")
    edge.edge_limits.cache_clear()
    loop: asyncio.AbstractEventLoop | None = None
    release = asyncio.Event()

    async def answers_then_works(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal loop
        if scope["type"] != "http":
            return
        loop = asyncio.get_running_loop()
        await answer_ok(send)
        await release.wait()  # the work after the answer

    try:
        with serving_in_thread(answers_then_works) as http:
            statuses = [http.get("/not-kuitti").status_code for _ in range(3)]
            assert statuses == [200, 200, 200]
            if loop is not None:
                loop.call_soon_threadsafe(release.set)
    finally:
        edge.edge_limits.cache_clear()


def test_a_request_read_in_time_but_taken_up_late_is_refused_under_a_standing_queue(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The wait that counts ends when the request's task first runs, not when its head was
    read: the tasks started in one turn of the event loop run one after another in the next.
    Two requests are read in one turn, each within the target; the first taken up holds the
    loop for twice the target, so the other has waited past it when its turn comes, and under
    a standing queue it is refused."""
    target = 0.05
    monkeypatch.setenv("KUITTI_QUEUE_TARGET_SECONDS", str(target))
    edge.edge_limits.cache_clear()
    edge.process_queue.cache_clear()
    limits = edge.edge_limits()
    queue = edge.process_queue(limits.longest_wait, limits.target_wait)
    queue.standing, queue.interval = True, math.inf  # one interval, never ending, standing
    holding, go_on = threading.Event(), threading.Event()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/hold":  # the loop held until both requests are sent
            holding.set()
            go_on.wait(SOCKET_TIMEOUT_SECONDS)
        elif scope["path"] == "/work":
            time.sleep(2 * target)  # the application's own work, on the loop
        await answer_ok(send)

    try:
        with serving_in_thread(app) as http:
            port = int(str(http.base_url).rstrip("/").rsplit(":", 1)[1])
            pair = [
                socket.create_connection(("127.0.0.1", port), SOCKET_TIMEOUT_SECONDS)
                for _ in range(2)
            ]
            for sock in pair:  # each connection taken up by the process before the test
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert first_line(sock) == b"HTTP/1.1 200 OK"
            holder = threading.Thread(target=http.get, args=("/hold",))
            holder.start()
            assert holding.wait(SOCKET_TIMEOUT_SECONDS)
            for sock in pair:
                sock.sendall(b"GET /work HTTP/1.1\r\nHost: x\r\n\r\n")
            go_on.set()
            holder.join(SOCKET_TIMEOUT_SECONDS)
            statuses = sorted(first_line(sock) for sock in pair)
            for sock in pair:
                sock.close()
        assert statuses == [b"HTTP/1.1 200 OK", b"HTTP/1.1 503 Service Unavailable"]
    finally:
        go_on.set()
        edge.edge_limits.cache_clear()
        edge.process_queue.cache_clear()


def test_a_request_served_under_a_standing_queue_has_a_deadline_for_its_reads(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under a standing queue the queue goes on in PostgreSQL's read line, after the task
    starts: a request served then must have its reads' connections by its arrival plus the
    target (``READ_BY``), which is after its task starts and no later than the target from
    then. A request served while no queue stands has no deadline."""
    target = 5.0  # far above any wait of a request sent alone, however slow the host
    monkeypatch.setenv("KUITTI_MAX_QUEUE_SECONDS", str(2 * target))
    monkeypatch.setenv("KUITTI_QUEUE_TARGET_SECONDS", str(target))
    edge.edge_limits.cache_clear()
    edge.process_queue.cache_clear()
    limits = edge.edge_limits()
    queue = edge.process_queue(limits.longest_wait, limits.target_wait)
    seen: list[tuple[float | None, float]] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        seen.append((READ_BY.get(), asyncio.get_running_loop().time()))
        await answer_ok(send)

    try:
        with serving_in_thread(app) as http:
            assert http.get("/work").status_code == 200
            queue.standing, queue.interval = True, math.inf  # one interval, never ending
            assert http.get("/work").status_code == 200
        (unset, _), (read_by, started) = seen
        assert unset is None
        assert read_by is not None
        assert started < read_by <= started + target
    finally:
        edge.edge_limits.cache_clear()
        edge.process_queue.cache_clear()


def test_the_wait_of_each_request_served_is_in_its_metric() -> None:
    """``kuitti_request_wait_seconds`` holds each served request's wait, from its arrival to
    the process's start on it: a request sent while the event loop is held waited at least as
    long as the loop stayed held after it was sent. The health endpoints, always served, are
    not counted."""

    def wait_metric() -> tuple[float, float]:
        count = REGISTRY.get_sample_value("kuitti_request_wait_seconds_count")
        total = REGISTRY.get_sample_value("kuitti_request_wait_seconds_sum")
        return count or 0.0, total or 0.0

    holding, go_on = threading.Event(), threading.Event()
    held_for = 0.05  # a wait made real by holding the loop, compared with what was measured

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] == "/hold":
            holding.set()
            go_on.wait(SOCKET_TIMEOUT_SECONDS)
        await answer_ok(send)

    edge.process_queue.cache_clear()
    try:
        with serving_in_thread(app) as http:
            port = int(str(http.base_url).rstrip("/").rsplit(":", 1)[1])
            with socket.create_connection(("127.0.0.1", port), SOCKET_TIMEOUT_SECONDS) as sock:
                sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
                assert first_line(sock) == b"HTTP/1.1 200 OK"
                count, total = wait_metric()
                holder = threading.Thread(target=http.get, args=("/hold",))
                holder.start()
                assert holding.wait(SOCKET_TIMEOUT_SECONDS)
                sock.sendall(b"GET /work HTTP/1.1\r\nHost: x\r\n\r\n")
                sent = time.monotonic()
                while time.monotonic() - sent < held_for:
                    time.sleep(held_for / 10)
                held = time.monotonic() - sent
                go_on.set()
                holder.join(SOCKET_TIMEOUT_SECONDS)
                assert first_line(sock) == b"HTTP/1.1 200 OK"
        after_count, after_total = wait_metric()
    finally:
        go_on.set()
        edge.process_queue.cache_clear()
    assert after_count == count + 2  # /hold and /work, not /healthz
    # The kernel counts the wait in ticks of up to 4 ms (HZ=250).
    assert after_total - total >= held - 0.005
