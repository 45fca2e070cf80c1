"""uvicorn's HTTP protocols, answering a request they cannot parse in the service's error shape.

A request line or header that the HTTP parser itself refuses (NUL or other bytes HTTP forbids in
the URL or a header name, a bad or repeated ``Content-Length``, a URL or header block beyond the
parser's limit, about 80 KB for httptools) never reaches the application: uvicorn answers 400
``Invalid HTTP request received.`` in plain text. These subclasses answer the same 400 as
``{"error": "bad_request", "decription": ...}``, and close the connection as uvicorn does.
``kuitti serve`` runs the httptools one, bounded in size and time by ``kuitti.edge``
(``HTTP_PROTOCOL``), as uvicorn's ``auto`` would pick httptools; the h11 one is for a deployment
that picks h11 (``--http kuitti.protocols:H11JsonErrors``).
"""

from __future__ import annotations

from collections.abc import Iterable
from http import HTTPStatus

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

HTTP_PROTOCOL = "kuitti.edge:http_protocol"


def bad_request_body(message: str) -> bytes:
    return orjson.dumps({"error": "bad_request", "decription": message})


def closing_answer(status: int, body: bytes, headers: Iterable[tuple[bytes, bytes]] = ()) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection: ``headers`` first, then the JSON
    ``body``'s type and length."""
    content = [b"HTTP/1.1 %d %s\r\n" % (status, HTTPStatus(status).phrase.encode("ascii"))]
    for name, value in headers:
        content.extend([name, b": ", value, b"\r\n"])
    content.append(
        b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n"
        % len(body)
    )
    content.append(body)
    return b"".join(content)


class HttpToolsJsonErrors(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        self.transport.write(
            closing_answer(400, bad_request_body(msg), self.server_state.default_headers)
        )
        self.transport.close()


class H11JsonErrors(H11Protocol):
    def send_400_response(self, msg: str) -> None:
        body = bad_request_body(msg)
        headers = [
            (b"content-type", b"application/json"),
            (b"content-length", str(len(body)).encode("ascii")),
            (b"connection", b"close"),
        ]
        for event in (
            h11.Response(status_code=400, headers=headers, reason=b"Bad Request"),
            h11.Data(data=body),
            h11.EndOfMessage(),
        ):
            self.transport.write(self.conn.send(event) or b"")
        self.transport.close()
