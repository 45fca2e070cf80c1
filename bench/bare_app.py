"""The bare-framework ceiling for ``bench/ingest.py``: FastAPI reading the body and validating the
receipt exactly as kuitti does, with no authentication, database or logging."""

from __future__ import annotations

from fastapi import FastAPI, Request

from kuitti.receipts.validation import parse_receipt_request
from kuitti.responses import ORJSONResponse

app = FastAPI()


@app.get("/healthz")
def healthz() -> dict[str, str]:
    return {"status": "ok"}


@app.post("/api/v1/receipts/")
async def create(request: Request) -> ORJSONResponse:
    parsed = parse_receipt_request(await request.body(), attachments_enabled=False)
    return ORJSONResponse({"receipt_number": parsed.receipt.receiptNumber})
