"""The references ``bench/ingest.py`` measures beside kuitti, in the same run.

- ``parse_only``: the ceiling. Starlette reads the body, parses the JSON and answers 200 with a
  fresh id; no validation, authentication, database or logging.
- ``validating``: FastAPI reading the body and validating the receipt exactly as kuitti does, so
  the gap between the two references is the framework and validation, and the gap to kuitti is
  the rest (authentication, the database, logging).
"""

from __future__ import annotations

import uuid

import orjson
from fastapi import FastAPI, Request
from starlette.applications import Starlette
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from kuitti.receipts.validation import parse_receipt_request
from kuitti.responses import ORJSONResponse


async def _parse_only_create(request: Request) -> Response:
    orjson.loads(await request.body())
    return Response(orjson.dumps({"receipt_id": str(uuid.uuid4())}), media_type="application/json")


async def _healthz(_request: Request) -> Response:
    return JSONResponse({"status": "ok"})


parse_only = Starlette(
    routes=[
        Route("/healthz", _healthz),
        Route("/api/v1/receipts/", _parse_only_create, methods=["POST"]),
    ]
)

validating = FastAPI()


@validating.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@validating.post("/api/v1/receipts/")
async def create(request: Request) -> ORJSONResponse:
    parsed = parse_receipt_request(await request.body(), attachments_enabled=False)
    return ORJSONResponse({"receipt_id": str(uuid.uuid4()), "number": parsed.receipt.receiptNumber})
