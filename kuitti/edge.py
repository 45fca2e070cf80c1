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
- the time from the arrival of the head's last byte to the moment the request's task first
  runs, with the wait ahead of it in the process's read line (``kuitti.db.READ_LINE``), to
  ``KUITTI_MAX_QUEUE_SECONDS``, and under a standing queue to ``KUITTI_QUEUE_TARGET_SECONDS``
  (``Queue``), and the requests the process works on at once to
  ``KUITTI_MAX_REQUESTS_IN_FLIGHT`` (``IN_FLIGHT``): 503 with ``Retry-After`` in the error
  shape, at once and without running the application (the health endpoints excepted,
  ``kuitti.admission``).

The wait is the kernel's count where it keeps one (Linux's ``TCP_INFO``: milliseconds since the
connection last received data), because that is where an overloaded process's queue forms: its
event loop, busy with the requests it took, accepts the next connections only as it gets round to
them, and they wait in the listening socket's accept queue, before the process knows of them
(``bench/overload.py`` measured seconds there and a millisecond after the accept). Elsewhere it
is the time since the process began reading the request. To it is added the time from the
reading to the task's first step: the tasks started in one turn of the event loop run one after
another in the next, so the last of them waits for all the others, 10-25 ms at twice the load
the process can serve. Under a standing queue a request whose wait so far, and the time the
tasks started before it will take (``InFlight.ahead``), pass the target is refused as it is
read; one that passes it all the same by its first step is refused there, before the
application runs. A refusal is bytes encoded once
(``kuitti.admission.BUSY_ANSWER``), written before the application runs. While the process may
shed, a new connection is first given ``Refusing``, which refuses a whole plain request from its
first bytes without uvicorn's protocol: about 30 microseconds of the process's time, the
connection's own cost included, against 85–93 through the full protocol and 0.6–0.9 ms for a
request served (``bench/overload.py --refusals``).

An idle kept-alive connection is closed by uvicorn's own ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import struct
from typing import Any, NamedTuple

import orjson
from uvicorn._types import ASGI3Application
from uvicorn.protocols.http.httptools_impl import RequestResponseCycle

from kuitti.admission import (
    ALWAYS_ADMITTED,
    BUSY_ANSWER,
    REFUSALS,
    STANDING_INTERVAL,
    STANDING_REQUESTS,
)
from kuitti.config import load_settings
from kuitti.db import READ_BY, READ_LINE
from kuitti.metrics import REQUEST_WAIT
from kuitti.protocols import HttpToolsJsonErrors, closing_answer

# ``struct tcp_info`` (linux/tcp.h) up to ``tcpi_last_data_recv``: the milliseconds since the
# connection last received data, the 14th 32-bit field after 8 one-byte ones.
TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)
LAST_DATA_RECV = struct.Struct("=52xI")


class Queue:
    """What one process knows of the queue in front of it, from the waits of the requests it
    takes up, and which of them it serves (CoDel's rule, as in Facebook's "Fail at Scale").

    A request that waited longer than ``longest`` is never served. Time is cut into intervals.
    The queue stands (more load than the process can serve) from the request that makes an
    interval hold at least ``STANDING_REQUESTS`` requests that waited longer than ``target``,
    more of them than not, and ``STANDING_REQUESTS`` already late when the process read them
    (their wait in the kernel, and on PostgreSQL the process's read line). From then on, and
    through the next interval, only the requests that waited less than the target are served,
    and the rest answered 503 at once; an interval with fewer late ones, or fewer than a third
    late, ends it. A burst of fewer late requests is served; so are a few clients on a host
    short of CPU, each of their requests late because the process was not running rather than
    because others were ahead of it.

    Most, not every: the process takes up at once every connection that arrived while it was
    busy, oldest first, so the last of them waited little even under a standing queue, and
    CoDel's "every packet above the target for an interval" never held. Late when read: an
    overloaded process leaves its next requests unread in the kernel, where their wait grows
    with the load. Clients that each send a request on the last one's answer wait instead
    behind one another in the event loop, as long as their number makes them (50 posting
    receipts, about 40 ms), and refusing them would only make them send again. Standing by the
    kernel's wait alone, the process read its requests in time once it shed, stopped standing,
    and served the next interval up to the longest wait (``bench/HISTORY.md``)."""

    def __init__(self, longest: float, target: float, interval: float = STANDING_INTERVAL) -> None:
        self.longest = longest
        self.target = min(target, longest)
        self.interval = interval
        self.began = float("-inf")  # the current interval's start
        self.late = 0  # requests of the current interval that waited longer than the target
        self.fresh = 0  # the others
        self.late_when_read = 0  # of the late ones, those past the target before they were read
        self.standing = False

    def admits(self, waited: float, now: float, late_when_read: bool = False) -> bool:
        """Whether a request taken up now (its task about to run), after waiting ``waited``
        in all, is served; counted."""
        self._interval_at(now)
        if waited <= self.target:
            self.fresh += 1
            return True
        return not self._counts_late(waited, late_when_read)

    def refuses_already(self, waited: float, now: float, ahead: float = 0.0) -> bool:
        """Whether a request read now, after waiting ``waited``, is refused whatever follows,
        with the ``ahead`` seconds it will wait for the requests read before it. Counted only
        if so (late when read if ``waited`` passed the target): otherwise ``admits`` counts it
        when it is taken up, so each request is counted once."""
        self._interval_at(now)
        if waited + ahead <= self.target or not (self.standing or waited > self.longest):
            return False
        return self._counts_late(waited + ahead, waited > self.target)

    def _interval_at(self, now: float) -> None:
        if now - self.began > self.interval:
            # The interval that ended decides the next one, if that one follows it.
            self.standing = now - self.began <= 2 * self.interval and self._stands()
            self.began = now
            self.late = self.fresh = self.late_when_read = 0

    def _counts_late(self, waited: float, late_when_read: bool) -> bool:
        """Counts a request that waited past the target; whether it is refused."""
        self.late += 1
        self.late_when_read += late_when_read
        self.standing = self.standing or self._stands()
        return self.standing or waited > self.longest

    def _stands(self) -> bool:
        """More late requests than fresh ones make a queue stand; once it stands, a third late
        keeps it: shedding half the load leaves late and fresh about equal, and "more late"
        alone switched on and off from one interval to the next (``bench/HISTORY.md``)."""
        weight = 2 if self.standing else 1
        return (
            self.late >= STANDING_REQUESTS
            and weight * self.late > self.fresh
            and self.late_when_read >= STANDING_REQUESTS
        )


@functools.cache
def process_queue(longest: float, target: float) -> Queue:
    """The process's one ``Queue``: every connection's protocol takes up requests from it."""
    return Queue(longest, target)


class InFlight:
    """The requests the process has taken up and not yet answered (their response not sent
    whole, their connection not lost). Not uvicorn's ``tasks``: a task ends a turn of the event
    loop or more after its response (the application's code after its last send, then the
    task's done callback), and by then the keep-alive client's next request may be read: 50
    clients posting receipts made more than 64 tasks."""

    def __init__(self) -> None:
        self.count = 0
        self.unstarted = 0  # of those, the ones whose task has not yet run
        self.share = 0.0  # seconds of the event loop's time a request not yet started costs

    def ahead(self) -> float:
        """The time a request taken up now waits for the event loop, by the requests taken up
        before it whose tasks have not yet run: they run first."""
        return self.unstarted * self.share

    def started(self, lag: float, ahead: int) -> None:
        """Learns ``share`` from a request whose task ran ``lag`` seconds after it was taken
        up, behind ``ahead`` others not yet started then (a moving average)."""
        self.unstarted -= 1
        if ahead:
            self.share += (lag / ahead - self.share) * SHARE_WEIGHT


SHARE_WEIGHT = 0.1
IN_FLIGHT = InFlight()
"""The process's one count: every connection's protocol counts its requests in it."""


class EdgeLimits(NamedTuple):
    max_head_bytes: int
    header_timeout: float
    body_timeout: float
    longest_wait: float
    target_wait: float
    max_in_flight: int


@functools.cache
def edge_limits() -> EdgeLimits:
    """The settings every connection is held to, read once per process."""
    settings = load_settings()
    return EdgeLimits(
        settings.max_header_bytes,
        settings.header_timeout_seconds,
        settings.body_timeout_seconds,
        settings.max_queue_seconds,
        settings.queue_target_seconds,
        settings.max_requests_in_flight,
    )


def kernel_wait(sock: socket.socket) -> float | None:
    """Seconds since ``sock`` last received data, by the kernel's count (Linux's ``TCP_INFO``),
    the time in the accept queue included; None where there is no such count."""
    if TCP_INFO is None:
        return None
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, TCP_INFO, LAST_DATA_RECV.size)
    except OSError:
        return None
    milliseconds: int = LAST_DATA_RECV.unpack(info)[0]
    return milliseconds / 1000


class BoundedHttpToolsProtocol(HttpToolsJsonErrors):
    """uvicorn's httptools protocol, answering in the error shape (``kuitti.protocols``), with
    the head's size, the time to receive a request and the time it waited bounded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        limits = edge_limits()
        self.max_head_bytes = limits.max_head_bytes
        self.header_timeout = limits.header_timeout
        self.body_timeout = limits.body_timeout
        self.max_in_flight = limits.max_in_flight
        self.queue = process_queue(limits.longest_wait, limits.target_wait)
        self.socket: socket.socket | None = None  # a TCP connection's, for its TCP_INFO
        self.head_began = 0.0
        self.head_bytes = 0  # of the finished parts of the current head
        self.head_seen = 0  # bytes received while the current head was unfinished
        self.in_head = True
        self.deadline: asyncio.TimerHandle | None = None
        self.refusal: tuple[int, str, str] | None = None
        self.answering = False  # a request of this connection counted in ``IN_FLIGHT``

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

    def _since_last_byte(self) -> float:
        """Seconds since the current request's last byte so far arrived: the kernel's count on a
        TCP connection where it keeps one (the time in the accept queue included), else since
        this process began reading the request."""
        if self.socket is not None:
            waited = kernel_wait(self.socket)
            if waited is not None:
                return waited
            self.socket = None
        return self.loop.time() - self.head_began

    def _start_asgi_task(self, cycle: RequestResponseCycle, app: ASGI3Application) -> None:
        """Starts the request's task, unless the process works on as many requests as it may
        (``IN_FLIGHT``) or the request will have waited too long when its task runs
        (``Queue.refuses_already``, with the wait for the tasks ahead of it): then 503 at once,
        before a task is made. Whether it is served is decided when its task first runs
        (``_taken_up``)."""
        if cycle.scope["path"] in ALWAYS_ADMITTED:
            self._count_in_flight()
            super()._start_asgi_task(cycle, app)
            return
        now = self.loop.time()
        waited = self._since_last_byte() + READ_LINE.ahead()
        if IN_FLIGHT.count >= self.max_in_flight:
            self._refuse_busy(cycle, "in flight")
        elif self.queue.refuses_already(waited, now, IN_FLIGHT.ahead()):
            self._refuse_busy(cycle, "queue")
        else:
            self._count_in_flight()
            ahead = IN_FLIGHT.unstarted
            IN_FLIGHT.unstarted += 1
            late_when_read = waited > self.queue.target
            taken_up = functools.partial(
                self._taken_up, cycle, app, now - waited, late_when_read, now, ahead
            )
            super()._start_asgi_task(cycle, taken_up)

    async def _taken_up(
        self,
        cycle: RequestResponseCycle,
        app: ASGI3Application,
        arrived: float,
        late_when_read: bool,
        read: float,
        ahead: int,
        scope: Any,
        receive: Any,
        send: Any,
    ) -> None:
        """Runs the request if the process's queue serves it (``Queue.admits``), by its wait
        from its last byte's arrival to now, when its task first runs. Not when it was read:
        the tasks started in one turn of the event loop run one after another in the next, so
        the last of them waited for all the others too (10-25 ms at twice the load the process
        can serve, ``bench/HISTORY.md``). The wait of each request served is in
        ``kuitti_request_wait_seconds``. Under a standing queue its reads must have their
        connections by its arrival plus the target (``kuitti.db.READ_BY``): on PostgreSQL the
        queue goes on in the read line, after the task starts."""
        now = self.loop.time()
        IN_FLIGHT.started(now - read, ahead)
        waited = now - arrived
        if self.queue.admits(waited, now, late_when_read):
            REQUEST_WAIT.observe(waited)
            if self.queue.standing:
                READ_BY.set(arrived + self.queue.target)  # this task's reads, no other's
            await app(scope, receive, send)
            return
        self._answered()
        cycle.response_started = cycle.response_complete = True  # nothing more of it is sent
        self._refuse_busy(cycle, "queue")

    def _count_in_flight(self) -> None:
        IN_FLIGHT.count += 1
        self.answering = True

    def _refuse_busy(self, cycle: RequestResponseCycle, why: str) -> None:
        cycle.response_complete = True  # the parser's calls for the rest of it do nothing
        REFUSALS.refused(cycle.scope["method"], why)
        self._close_with(BUSY_ANSWER)

    # -- uvicorn's protocol, extended -------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        sock = transport.get_extra_info("socket")
        if TCP_INFO is not None and sock is not None and sock.family != socket.AF_UNIX:
            self.socket = sock
        self._arm(self.header_timeout, self._head_too_slow)

    def _answered(self) -> None:
        if self.answering:
            self.answering = False
            IN_FLIGHT.count -= 1

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        self._answered()
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
        self._answered()
        super().on_response_complete()
        if not self.transport.is_closing() and self.deadline is None:
            self._arm(self.header_timeout, self._head_too_slow)


# The methods a refusal may be counted under without the parser's check (a label per method).
PLAIN_METHODS = frozenset({b"GET", b"HEAD", b"POST", b"PUT", b"PATCH", b"DELETE", b"OPTIONS"})
ALWAYS_ADMITTED_PATHS = frozenset(path.encode("ascii") for path in ALWAYS_ADMITTED)


class Refusing(asyncio.Protocol):
    """A connection taken while the process sheds: it refuses its request from the first bytes
    received, without uvicorn's protocol, its parser or its timers, when they hold a whole head
    of a plain request that the process would refuse (``refuses``). Anything else (a head in
    pieces, a health check, an odd request line, a request the process now admits) is handed to
    ``BoundedHttpToolsProtocol`` with those bytes, and it decides as for any request."""

    __slots__ = ("full", "refuses", "transport")

    def __init__(self, full: Any, refuses: Any) -> None:
        self.full = full  # makes the full protocol
        self.refuses = refuses  # (socket) -> the reason to refuse, or None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        transport = self.transport
        assert transport is not None
        method, _, rest = data.partition(b" ")
        target = rest.partition(b" ")[0]
        why = (
            self.refuses(transport.get_extra_info("socket"))
            if method in PLAIN_METHODS
            and target[:1] == b"/"
            and target.partition(b"?")[0] not in ALWAYS_ADMITTED_PATHS
            and b"%" not in target
            and b"\r\n\r\n" in data
            else None
        )
        if why is None:
            self.hand_over(data)
            return
        REFUSALS.refused(method.decode("ascii"), why)
        transport.write(BUSY_ANSWER)
        transport.close()

    def hand_over(self, data: bytes) -> None:
        full = self.full()
        transport = self.transport
        assert transport is not None
        transport.set_protocol(full)
        full.connection_made(transport)
        full.data_received(data)

    def eof_received(self) -> bool | None:
        transport = self.transport
        assert transport is not None
        transport.close()
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None


def http_protocol(**uvicorn_arguments: Any) -> asyncio.Protocol:
    """The protocol of a connection ``kuitti serve`` accepts (``kuitti.protocols.HTTP_PROTOCOL``):
    ``BoundedHttpToolsProtocol``, or while the process may shed (a request of this interval
    late, or as many requests in flight as it may have) ``Refusing``, whose refusal costs the
    process a third of the full protocol's (``bench/overload.py --refusals``)."""
    limits = edge_limits()
    queue = process_queue(limits.longest_wait, limits.target_wait)
    if not (queue.standing or queue.late) and IN_FLIGHT.count < limits.max_in_flight:
        return BoundedHttpToolsProtocol(**uvicorn_arguments)
    loop = uvicorn_arguments.get("_loop") or asyncio.get_event_loop()

    def refuses(sock: socket.socket | None) -> str | None:
        if IN_FLIGHT.count >= limits.max_in_flight:
            return "in flight"
        waited = None if sock is None else kernel_wait(sock)
        if waited is None:
            return None
        waited += READ_LINE.ahead()
        if queue.refuses_already(waited, loop.time(), IN_FLIGHT.ahead()):
            return "queue"
        return None

    return Refusing(functools.partial(BoundedHttpToolsProtocol, **uvicorn_arguments), refuses)
