"""A JSON response rendered by orjson (several times faster than the stdlib for receipts)."""

from __future__ import annotations

from typing import Any

import orjson
from fastapi.responses import JSONResponse


class ORJSONResponse(JSONResponse):
    def render(self, content: Any) -> bytes:
        return orjson.dumps(content)
