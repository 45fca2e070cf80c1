"""The partner key authenticators (``kuitti.partners.keys``) as FastAPI dependencies."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header, Request

from kuitti.deps import ReadSession, release_connection
from kuitti.partners.keys import MERCHANTS, Credentials, KeyHolder, app_key_of


async def _credentials(
    request: Request, authorization: Annotated[str | None, Header()] = None
) -> Credentials:
    # ``authorization`` declared rather than read from ``request``: the API document describes
    # how each operation is authenticated from it (``kuitti.openapi``).
    return Credentials(authorization, app_key_of(request.headers))


RequestCredentials = Annotated[Credentials, Depends(_credentials)]
"""The request's ``Authorization`` and app key (``SERVICE_APIKEY`` or ``Service-Apikey``)."""


def _merchant(session: ReadSession, credentials: RequestCredentials) -> KeyHolder:
    holder = MERCHANTS.holder(session, credentials)
    release_connection(session)  # before the route runs: deps.py says why
    return holder


MerchantPartner = Annotated[KeyHolder, Depends(_merchant)]
