"""User tokens (JWT access tokens) on API requests."""

from __future__ import annotations

from kuitti.deps import Services
from kuitti.errors import Unauthorized
from kuitti.receipts.service import Reader


def connection_reader(services: Services, app_key: str, bearer_token: str) -> Reader:
    """A reader acting for the user of the token's connection (built by the OAuth work)."""
    raise Unauthorized("User tokens are not accepted yet.")
