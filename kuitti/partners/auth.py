"""Who is calling: partner API keys in ``Authorization`` (``Token <key>`` or the bare key)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated

from fastapi import Depends, Header, Request

from kuitti.deps import ReadSession, release_connection
from kuitti.models import PartnerRole
from kuitti.partners.keys import KeyHolder, key_holder, require_role


def _merchant(
    session: ReadSession, authorization: Annotated[str | None, Header()] = None
) -> KeyHolder:
    holder = require_role(key_holder(session, authorization), PartnerRole.MERCHANT)
    release_connection(session)  # before the route runs: deps.py says why
    return holder


MerchantPartner = Annotated[KeyHolder, Depends(_merchant)]


def service_api_key(headers: Mapping[str, str]) -> str | None:
    """The partner application key from ``SERVICE_APIKEY`` or ``Service-Apikey``, if sent:
    proxies such as nginx drop header names with underscores by default, so both work."""
    return headers.get("service_apikey") or headers.get("service-apikey")


async def _service_api_key(request: Request) -> str | None:
    return service_api_key(request.headers)


ServiceApiKey = Annotated[str | None, Depends(_service_api_key)]
"""The partner application key from ``SERVICE_APIKEY`` (or ``Service-Apikey``), if sent."""
