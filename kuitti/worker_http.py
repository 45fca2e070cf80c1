"""What ``kuitti worker`` answers on a port of its own: ``/healthz`` (liveness) and ``/metrics``
(Prometheus), so the worker's webhook, e-mail and card-linking metrics can be scraped.

A few lines of asyncio rather than a web framework: two constant routes, read by a scraper."""

from __future__ import annotations

import asyncio
import socket

from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

READ_TIMEOUT_SECONDS = 10.0
MAX_HEADER_LINES = 100


def bind_monitoring(host: str, port: int) -> socket.socket:
    """The listening socket, bound now so that a port in use stops the command at start."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError:
        sock.close()
        raise
    sock.listen(16)
    return sock


def answer(path: str) -> tuple[str, str, bytes]:
    """Status line, media type and body for a GET of ``path``."""
    if path == "/metrics":
        return "200 OK", CONTENT_TYPE_LATEST, generate_latest()
    if path == "/healthz":
        return "200 OK", "application/json", b'{"status":"ok"}'
    body = b'{"error":"not_found","decription":"The worker answers /healthz and /metrics."}'
    return "404 Not Found", "application/json", body


async def _handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    try:
        async with asyncio.timeout(READ_TIMEOUT_SECONDS):
            request_line = (await reader.readline()).decode("latin-1").split()
            for _ in range(MAX_HEADER_LINES):
                if (await reader.readline()).strip() == b"":
                    break
        path = request_line[1].split("?", 1)[0] if len(request_line) == 3 else ""
        status, media_type, body = answer(path)
        if request_line[:1] not in (["GET"], ["HEAD"]):
            status, media_type, body = "405 Method Not Allowed", "text/plain", b""
        head = (
            f"HTTP/1.1 {status}\r\nContent-Type: {media_type}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        writer.write(head.encode() + (body if request_line[:1] == ["GET"] else b""))
        await writer.drain()
    except (TimeoutError, ConnectionError, ValueError):
        pass  # a client that went away or sent nonsense gets nothing more
    finally:
        writer.close()


async def serve_monitoring(sock: socket.socket) -> asyncio.Server:
    return await asyncio.start_server(_handle, sock=sock)
