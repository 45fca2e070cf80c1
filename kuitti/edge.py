"""The HTTP protocol ``kuitti serve`` runs: uvicorn's httptools protocol with bounded requests.

uvicorn bounds neither a request's head nor the time a client takes to send it: a header that
never ends grows in memory, and a client that sends a byte now and then holds its connection
open for ever. Here every request is held to three settings:

- its head (request line and headers) to ``KUITTI_MAX_HEADER_BYTES``: 431 in the error shape;
- the time from a connection's opening, or the end of its previous response, to the end of the
  head to ``KUITTI_HEADER_TIMEOUT_SECONDS``: 408 in the error shape;
- the time from the end of the head to the end of the body to ``KUITTI_BODY_TIMEOUT_SECONDS``:
  408 unless a response has started, and the connection is closed either way.

An idle kept-alive connection is closed by uvicorn's own ``timeout_keep_alive``.
"""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import orjson

from kuitti.config import load_settings
from kuitti.protocols import HttpToolsJsonErrors, closing_answer


@functools.cache
def edge_limits() -> tuple[int, float, float]:
    """(largest head in bytes, header timeout, body timeout), read once per process."""
    settings = load_settings()
    return (
        settings.max_header_bytes,
        settings.header_timeout_seconds,
        settings.body_timeout_seconds,
    )


class BoundedHttpToolsProtocol(HttpToolsJsonErrors):
    """uvicorn's httptools protocol, answering in the error shape (``kuitti.protocols``), with
    the head's size and the time to receive a request bounded."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.max_head_bytes, self.header_timeout, self.body_timeout = edge_limits()
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
        self._disarm()
        if self.transport.is_closing():
            return
        self.transport.write(
            closing_answer(status, orjson.dumps({"error": code, "decription": description}))
        )
        self.transport.close()

    # -- uvicorn's protocol, extended -------------------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
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
