"""Who may read receipts (reading one and the list): a partner by its API key, or a partner
application on behalf of a user (``SERVICE_APIKEY`` + ``Authorization: Bearer``)."""

from __future__ import annotations

from typing import Annotated

from fastapi import Depends, Header

from kuitti.deps import Now, ReadSession, ServicesDep
from kuitti.errors import Unauthorized
from kuitti.oauth.bearer import reading_connection
from kuitti.partners.auth import ServiceApiKey, authenticate_partner
from kuitti.receipts.service import Reader


def _reader(
    services: ServicesDep,
    session: ReadSession,
    now: Now,
    app_key: ServiceApiKey,
    authorization: Annotated[str | None, Header()] = None,
) -> Reader:
    if authorization and authorization.lower().startswith("bearer "):
        if not app_key:
            raise Unauthorized("User-authorized reading needs the SERVICE_APIKEY header too.")
        token = authorization[7:].strip()
        connection = reading_connection(session, services.settings, app_key, token, now=now)
        return Reader(partner_id=connection.partner_id, user_id=connection.user_id)
    partner = authenticate_partner(services, session, authorization or app_key)
    return Reader(partner_id=partner.id)


ReceiptReader = Annotated[Reader, Depends(_reader)]
