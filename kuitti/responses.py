"""JSON answers: rendered by orjson (several times faster than the stdlib for receipts), and the
interface's error shape."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orjson
from fastapi.responses import JSONResponse

from kuitti.errors import ErrorDetail


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)


def error_response(
    details: Sequence[ErrorDetail], status: int, headers: Mapping[str, str] | None = None
) -> ORJSONResponse:
    """One ``{error, decription}`` object, or a list of them when there are several."""
    body: object = details[0].as_json() if len(details) == 1 else [d.as_json() for d in details]
    return ORJSONResponse(body, status_code=status, headers=headers)
