"""One error base that carries its HTTP status and code.

The interface's error shape is ``{"error": <code>, "decription": <text>}`` (the field name is
spelled that way on purpose), or a list of such objects when several rules fail.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ErrorDetail:
    code: str
    description: str

    def as_json(self) -> dict[str, str]:
        return {"error": self.code, "decription": self.description}


class KuittiError(Exception):
    status_code = 400
    code = "bad_request"

    def __init__(self, description: str, *, code: str | None = None) -> None:
        super().__init__(description)
        self.description = description
        if code is not None:
            self.code = code

    def details(self) -> list[ErrorDetail]:
        return [ErrorDetail(self.code, self.description)]

    def headers(self) -> dict[str, str]:
        return {}


class InvalidRequest(KuittiError):
    """One or more rules failed; every failure is reported at once."""

    status_code = 400

    def __init__(self, errors: list[ErrorDetail]) -> None:
        assert errors, "InvalidRequest needs at least one error"
        super().__init__(errors[0].description, code=errors[0].code)
        self.errors = errors

    def details(self) -> list[ErrorDetail]:
        return self.errors


class Unauthorized(KuittiError):
    status_code = 401
    code = "unauthorized"

    def headers(self) -> dict[str, str]:
        return {"WWW-Authenticate": "Token"}


class Forbidden(KuittiError):
    status_code = 403
    code = "forbidden"


class InsufficientScope(KuittiError):
    status_code = 403
    code = "insufficient_scope"


class NotFound(KuittiError):
    status_code = 404
    code = "not_found"

    def __init__(self, description: str = "No such resource, or you may not see it.") -> None:
        super().__init__(description)


class Conflict(KuittiError):
    status_code = 409
    code = "conflict"


class UnsupportedMediaType(KuittiError):
    status_code = 415
    code = "unsupported_media_type"


class TooManyRequests(KuittiError):
    status_code = 429
    code = "too_many_requests"


DATABASE_RETRY_AFTER_SECONDS = 2
"""What a client is told to wait while the database is away: a restarted server or a promoted
standby usually answers within seconds, and the pool reconnects on the next request."""


class DatabaseUnavailable(KuittiError):
    """The database a request needs cannot be reached, or cannot take writes now (a standby, a
    server shutting down or starting, a read-only transaction default): 503 with ``Retry-After``,
    never 500 (``kuitti.db.unavailable_as_503``)."""

    status_code = 503
    code = "database_unavailable"

    def __init__(
        self,
        description: str = "The database cannot be reached or cannot take writes at the moment. "
        "Try again after Retry-After seconds; a post retried with the same Idempotency-Key is "
        "stored once.",
    ) -> None:
        super().__init__(description)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(DATABASE_RETRY_AFTER_SECONDS)}


BUSY_RETRY_AFTER_SECONDS = 1


class ServiceBusy(KuittiError):
    """More load than the process can serve (``kuitti.admission``): 503 with ``Retry-After`` at
    once, nothing done, instead of a wait in a queue."""

    status_code = 503
    code = "service_unavailable"

    def __init__(
        self,
        description: str = "The service is busier than it can serve; nothing was done. "
        "Try again shortly.",
    ) -> None:
        super().__init__(description)

    def headers(self) -> dict[str, str]:
        return {"Retry-After": str(BUSY_RETRY_AFTER_SECONDS)}
