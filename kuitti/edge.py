"""The HTTP protocol ``kuitti serve`` runs: uvicorn's httptools protocol with bounded requests.

uvicorn bounds neither a request's head nor the time a client takes to send it: a header that
never ends grows in memory, and a client that sends a byte now and then holds its connection
open for ever. Nor does it bound the time a request waits to be taken up. Here every request is
held to four settings:

- its head (request line and headers) to ``KUITTI_MAX_HEADER_BYTES``: 431 in the error shape;
- the time from a connection's opening, or the end of its previous response, to the end of the
  head to ``KUITTI_HEADER_TIMEOUT_SECONDS``: 408 in the error shape;
- the time from the end of the head to the end of the body to ``KUITTI_BODY_TIMEOUT_SECONDS``:
  408 unless a response has started, and the connection is closed either way;
- the time from the arrival of the head's last byte to the moment the process takes the request
  up to ``KUITTI_MAX_QUEUE_SECONDS`` (``Queue``), and the requests the process works on at once
  to ``KUITTI_MAX_REQUESTS_IN_FLIGHT``: 503 with ``Retry-After`` in the error shape, at once
  and without running the application (the health endpoints excepted, ``kuitti.admission``).

The wait is the kernel's count where it keeps one (Linux's ``TCP_INFO``: milliseconds since the
connection last received data), because that is where an overloaded process's queue forms: its
event loop, busy with the requests it took, accepts the next connections only as it gets round to
them, and they wait in the listening socket's accept queue, before the process knows of them
(``bench/overload.py`` measured seconds there and a millisecond after the accept). Elsewhere it
is the time since the process began reading the request. A refusal is bytes encoded once
(``kuitti.admission.BUSY_ANSWER``), written before the application runs: with the connection's
own cost, 80–90 microseconds of the process's time against 0.7–0.9 ms for a request served
(``bench/overload.py``), so a process under five times the load it can serve still clears its
queue, and the requests it serves waited at most the bound.

An idle kept-alive connection is closed by uvicorn's own ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
from typing import Any

import orjson
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from kuitti.admission import ALWAYS_ADMITTED, BUSY_ANSWER, REFUSALS, TARGET_SHARE
from kuitti.config import load_settings
from kuitti.protocols import HttpToolsJsonErrors, closing_answer

# ``struct tcp_info`` (linux/tcp.h) up to ``tcpi_last_data_recv``: the milliseconds since the
# connection last received data, the 14th 32-bit field after 8 one-byte ones.
TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)
LAST_DATA_RECV = struct.Struct("=52xI")


class Queue:
    """What one process knows of the queue in front of it, from the waits of the requests it
    takes up, and which of them it serves.

    A request that waited longer than ``longest`` is never served. A burst (a stall of the
    event loop, many clients at once) makes a queue that clears by itself: its requests are
    served. A queue that stands, every request for ``longest / 5`` having waited longer than a
    quarter of ``longest`` (the target), is more load than the process can serve (CoDel's rule):
    from then on only the requests that waited less than the target are served, and the rest
    answered 503 at once, until none has waited longer for ``longest / 5``. The requests served
    under a standing load then waited at most the target, not the longest wait."""

    def __init__(self, longest: float) -> None:
        self.longest = longest
        self.target = longest * TARGET_SHARE
        self.interval = longest / 5
        self.above_since: float | None = None  # every request since then waited > target
        self.last_above = float("-inf")
        self.standing = False

    def admits(self, waited: float, now: float) -> bool:
        if waited <= self.target:
            self.above_since = None
            if self.standing and now - self.last_above > self.interval:
                self.standing = False
            return True
        self.last_above = now
        if self.above_since is None:
            self.above_since = now
        elif now - self.above_since > self.interval:
            self.standing = True
        return not self.standing and waited <= self.longest


@functools.cache
def process_queue(longest: float) -> Queue:
    """The process's one ``Queue``: every connection's protocol takes up requests from it."""
    return Queue(longest)


@functools.cache
def edge_limits() -> tuple[int, float, float, float, int]:
    """(largest head in bytes, header timeout, body timeout, longest wait, requests in flight),
    read once per process."""
    settings = load_settings()
    return (
        settings.max_header_bytes,
        settings.header_timeout_seconds,
        settings.body_timeout_seconds,
        settings.max_queue_seconds,
        settings.max_requests_in_flight,
    )


class BoundedHttpToolsProtocol(HttpToolsJsonErrors):
    """uvicorn's httptools protocol, answering in the error shape (``kuitti.protocols``), with
    the head's size, the time to receive a request and the time it waited bounded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        (
            self.max_head_bytes,
            self.header_timeout,
            self.body_timeout,
            longest_wait,
            self.max_in_flight,
        ) = edge_limits()
        self.queue = process_queue(longest_wait)
        self.socket: socket.socket | None = None  # a TCP connection's, for its TCP_INFO
        self.head_began = 0.0
        self.head_bytes = 0  # of the finished parts of the current head
        self.head_seen = 0  # bytes received while the current head was unfinished
        self.in_head = True
        self.deadline: asyncio.TimerHandle | None = None
        self.refusal: tuple[int, str, str] | None = None

    # -- the deadlines ----------------------------------------------------------------------

    def _arm(self, seconds: float, on_expiry: Any) -> None:
        self._disarm()
        self.deadline = self.loop.call_later(seconds, on_expiry)

    def _disarm(self) -> None:
        if self.deadline is not None:
            self.deadline.cancel()
            self.deadline = None

    def _head_too_slow(self) -> None:
        self.deadline = None
        self._refuse(408, "request_timeout", "The request's headers took too long to arrive.")

    def _body_too_slow(self) -> None:
        self.deadline = None
        if self.cycle is not None and self.cycle.response_started:
            self.transport.close()
        else:
            self._refuse(408, "request_timeout", "The request's body took too long to arrive.")

    # -- the head's size --------------------------------------------------------------------

    def _too_large(self) -> tuple[int, str, str]:
        return (
            431,
            "header_too_large",
            f"The request line and headers are larger than the limit of "
            f"{self.max_head_bytes} bytes.",
        )

    def _count(self, size: int) -> None:
        """Counts a finished part of the head; raising stops the parser, which answers through
        ``send_400_response`` with the refusal set here."""
        self.head_bytes += size
        if self.head_bytes > self.max_head_bytes:
            self.refusal = self._too_large()
            raise ValueError("head too large")

    def _refuse(self, status: int, code: str, description: str) -> None:
        self._close_with(
            closing_answer(status, orjson.dumps({"error": code, "decription": description}))
        )

    def _close_with(self, answer: bytes) -> None:
        self._disarm()
        if not self.transport.is_closing():
            self.transport.write(answer)
            self.transport.close()

    # -- the wait ---------------------------------------------------------------------------

    def waited(self) -> float:
        """Seconds since the current request's last byte so far arrived: the kernel's count on a
        TCP connection where it keeps one (the time in the accept queue included), else since
        this process began reading the request."""
        if self.socket is not None and TCP_INFO is not None:
            try:
                info = self.socket.getsockopt(socket.IPPROTO_TCP, TCP_INFO, LAST_DATA_RECV.size)
            except OSError:
                self.socket = None
            else:
                milliseconds: int = LAST_DATA_RECV.unpack(info)[0]
                return milliseconds / 1000
        return self.loop.time() - self.head_began

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        """Runs the request, unless the process's queue sheds it (``Queue``) or it works on
        as many requests as it may (uvicorn's ``tasks``: one a request from its start to its
        response's end): then 503 at once."""
        waited_briefly = self.queue.admits(self.waited(), self.loop.time())
        room = len(self.tasks) < self.max_in_flight
        if (waited_briefly and room) or cycle.scope["path"] in ALWAYS_ADMITTED:
            super()._start_asgi_task(cycle, app)
            return
        cycle.response_complete = True  # the parser's calls for the rest of it do nothing
        REFUSALS.refused(cycle.scope["method"], "queue" if not waited_briefly else "in flight")
        self._close_with(BUSY_ANSWER)

    # -- uvicorn's protocol, extended -------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if TCP_INFO is not None and sock is not None and sock.family != socket.AF_UNIX:
            self.socket = sock
        self._arm(self.header_timeout, self._head_too_slow)

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self.in_head:
            self.head_seen += len(data)
        super().data_received(data)
        # A head still unfinished after this chunk: what arrived since it began was all head.
        if self.in_head and self.head_seen > self.max_head_bytes:
            self._refuse(*self._too_large())

    def send_400_response(self, msg: str) -> None:
        if self.refusal is not None:
            self._refuse(*self.refusal)
        else:
            super().send_400_response(msg)

    def on_message_begin(self) -> None:
        self.head_began = self.loop.time()
        super().on_message_begin()
        if self.deadline is None:
            self._arm(self.header_timeout, self._head_too_slow)

    def on_url(self, url: bytes) -> None:
        self._count(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count(len(name) + len(value) + 4)
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self.in_head = False
        self.head_bytes = self.head_seen = 0
        self._arm(self.body_timeout, self._body_too_slow)
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self.in_head = True  # what follows is the next request's head
        super().on_message_complete()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        if not self.transport.is_closing() and self.deadline is None:
            self._arm(self.header_timeout, self._head_too_slow)
