"""Who the client is: the connecting peer, or the address a configured proxy forwarded.

The throttles (login, receipt-link pages) count per client address, so a forwarded header is
believed only from a peer in ``KUITTI_TRUSTED_PROXIES``; from anyone else, loopback included,
``X-Forwarded-For`` and ``X-Forwarded-Proto`` are ignored. The application applies this itself,
so it holds under any ASGI server; ``kuitti serve`` turns uvicorn's own proxy handling off.
"""

from __future__ import annotations

from typing import Any, cast

from starlette.requests import Request
from starlette.types import ASGIApp, Receive, Scope, Send
from uvicorn.middleware.proxy_headers import ProxyHeadersMiddleware


class TrustedProxyHeaders:
    """Takes the client address and scheme from ``X-Forwarded-For``/``X-Forwarded-Proto`` when
    the peer is one of ``trusted`` (addresses or networks); with none, nothing is forwarded."""

    def __init__(self, app: ASGIApp, *, trusted: tuple[str, ...]) -> None:
        self.app = (
            cast(ASGIApp, ProxyHeadersMiddleware(cast(Any, app), trusted_hosts=list(trusted)))
            if trusted
            else app
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.app(scope, receive, send)


def client_address(request: Request) -> str:
    """The address the throttles count by (``TrustedProxyHeaders`` has set it)."""
    return request.client.host if request.client else "unknown"
