"""``KuittiError``: an answer that is not a success, as a typed exception."""

from __future__ import annotations

from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

import httpx
from pydantic import ValidationError

from kuitti_client.models import ErrorBody


class KuittiError(Exception):
    """The service refused a request.

    ``status`` is the HTTP status, ``error`` the code (``invalid_value``, ``unauthorized``, …),
    ``decription`` the text (the interface's spelling), ``errors`` every error of the body (a
    rejected receipt lists each problem) and ``retry_after`` the seconds the service asked to
    wait, when it did (429, 503)."""

    def __init__(
        self,
        status: int,
        error: str,
        decription: str,
        errors: list[ErrorBody] | None = None,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(f"{status} {error}: {decription}")
        self.status = status
        self.error = error
        self.decription = decription
        self.errors = errors if errors is not None else []
        self.retry_after = retry_after

    @classmethod
    def from_response(cls, response: httpx.Response) -> KuittiError:
        errors = _error_bodies(response)
        first = errors[0] if errors else ErrorBody(error=f"http_{response.status_code}")
        text = first.decription or first.error_description or response.reason_phrase
        return cls(response.status_code, first.error, text, errors, retry_after(response))


def _error_bodies(response: httpx.Response) -> list[ErrorBody]:
    try:
        body = response.json()
    except ValueError:
        return []
    items = body if isinstance(body, list) else [body]
    try:
        return [ErrorBody.model_validate(item) for item in items]
    except ValidationError:
        return []


def retry_after(response: httpx.Response, now: datetime | None = None) -> float | None:
    """The ``Retry-After`` header in seconds (delay-seconds or an HTTP date), or None."""
    value = response.headers.get("retry-after")
    if value is None:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        moment = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return max(0.0, (moment - (now or datetime.now(UTC))).total_seconds())
