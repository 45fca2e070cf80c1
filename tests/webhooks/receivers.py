"""Real HTTP webhook receivers on loopback, with scripted behaviour per request."""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType


@dataclass(frozen=True)
class Behaviour:
    """How the receiver answers one request."""

    status: int = 200
    delay_seconds: float = 0.0  # answer slowly (the server's own pace, not a test sleep)
    hang: bool = False  # never answer until the receiver stops (a timeout on the client)
    close: bool = False  # read the request, then drop the connection without an answer
    location: str | None = None


@dataclass(frozen=True)
class Received:
    path: str
    headers: dict[str, str]
    body: bytes
    monotonic: float

    @property
    def webhook_id(self) -> str:
        return self.headers["webhook-id"]


@dataclass
class _State:
    script: list[Behaviour] = field(default_factory=list)
    default: Behaviour = field(default_factory=Behaviour)
    received: list[Received] = field(default_factory=list)
    condition: threading.Condition = field(default_factory=threading.Condition)
    release: threading.Event = field(default_factory=threading.Event)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: object) -> None:
        return

    def do_POST(self) -> None:
        state = self.server.state
        length = int(self.headers.get("Content-Length", "0"))
        body = self.rfile.read(length)
        with state.condition:
            behaviour = state.script.pop(0) if state.script else state.default
            # Header names as lower-case keys; the raw list keeps duplicates out of sight.
            headers = {k.lower(): v for k, v in self.headers.items()}
            state.received.append(Received(self.path, headers, body, time.monotonic()))
            state.condition.notify_all()
        if behaviour.hang:
            state.release.wait(30)
            self.close_connection = True
            return
        if behaviour.close:
            self.close_connection = True
            return
        if behaviour.delay_seconds:
            state.release.wait(behaviour.delay_seconds)
        payload = b'{"ok": true}'
        self.send_response(behaviour.status)
        if behaviour.location:
            self.send_header("Location", behaviour.location)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256
    state: _State


class Receiver:
    """A partner's webhook endpoint: ``with Receiver() as r: ... r.wait_for(1)``."""

    def __init__(self, *script: Behaviour, default: Behaviour | None = None) -> None:
        self._server = _Server(("127.0.0.1", 0), _Handler)
        self._server.state = _State(script=list(script), default=default or Behaviour())
        self.port = self._server.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/hooks/kuitti"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )

    def __enter__(self) -> Receiver:
        self._thread.start()
        return self

    def __exit__(
        self,
        _type: type[BaseException] | None,
        _exc: BaseException | None,
        _tb: TracebackType | None,
    ) -> None:
        self._server.state.release.set()
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=10)

    def release_all(self) -> None:
        """Let every held answer (``delay_seconds``, ``hang``) go now."""
        self._server.state.release.set()

    @property
    def received(self) -> list[Received]:
        with self._server.state.condition:
            return list(self._server.state.received)

    def wait_for(self, count: int, timeout_seconds: float = 10.0) -> list[Received]:
        """Block until ``count`` requests have arrived (fails the test after the timeout)."""
        state = self._server.state
        with state.condition:
            arrived = state.condition.wait_for(
                lambda: len(state.received) >= count, timeout_seconds
            )
            got = list(state.received)
        assert arrived, f"expected {count} webhook calls, got {len(got)}"
        return got
