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

import h11
import orjson
from uvicorn.protocols.http.h11_impl import H11Protocol
from uvicorn.protocols.http.httptools_impl import STATUS_LINE, HttpToolsProtocol

HTTP_PROTOCOL = "kuitti.edge:BoundedHttpToolsProtocol"


def bad_request_body(message: str) -> bytes:
    return orjson.dumps({"error": "bad_request", "decription": message})


class HttpToolsJsonErrors(HttpToolsProtocol):
    def send_400_response(self, msg: str) -> None:
        body = bad_request_body(msg)
        content = [STATUS_LINE[400]]
        for name, value in self.server_state.default_headers:
            content.extend([name, b": ", value, b"\r\n"])
        content.extend(
            [
                b"content-type: application/json\r\n",
                b"content-length: " + str(len(body)).encode("ascii") + b"\r\n",
                b"connection: close\r\n",
                b"\r\n",
                body,
            ]
        )
        self.transport.write(b"".join(content))
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
