"""Who may read receipts (Endpoint 3 and the list): a partner by its API key, or a partner
application on behalf of a user (``SERVICE_APIKEY`` + ``Authorization: Bearer``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header

from kuitti.deps import ServicesDep
from kuitti.errors import Unauthorized
from kuitti.oauth.bearer import connection_reader
from kuitti.partners.auth import ServiceApiKey, authenticate_partner
from kuitti.receipts.service import Reader


def _reader(
    services: ServicesDep,
    app_key: ServiceApiKey,
    authorization: Annotated[str | None, Header()] = None,
) -> Reader:
    if authorization and authorization.lower().startswith("bearer "):
        if not app_key:
            raise Unauthorized("User-authorized reading needs the SERVICE_APIKEY header too.")
        return connection_reader(services, app_key, authorization[7:].strip())
    partner = authenticate_partner(services, authorization or app_key)
    return Reader(partner_id=partner.id)


ReceiptReader = Annotated[Reader, Depends(_reader)]
