"""The front door answers as it did before the routes moved: the same status, headers and body,
for every API path in both slash forms, every method, without a key, with a wrong key, and with
the right key and bad input, plus the OpenAPI document.

The expected answers (``front_answers.json``) were first recorded from the app as it was before
the receipt post moved to the front door table and the slash twins became one middleware. They
are written again (``KUITTI_RECORD_ANSWERS=1``) only when an answer changes on purpose, so that
the file's diff shows every answer that changed."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import httpx

from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.factories import make_partner, receipt_doc

EXPECTED = Path(__file__).with_name("front_answers.json")
UUID = "0b5e1f2a-0000-4000-8000-000000000000"
API_PATHS = (
    "/api/v1/receipts/",
    f"/api/v1/receipts/{UUID}/service_json/",
    f"/api/v1/receipts/{UUID}/unknown/",
    "/api/v1/receipts/not-a-uuid/service_pdf/",
    "/api/v1/receipts/validate",
    "/api/v1/qr-codes/",
    "/api/oauth/token",
    "/api/oauth/revoke",
    "/api/v1/cards/",
    "/api/v1/cards/some-card/",
    "/api/v1/card-transactions/",
)
OTHER_PATHS = ("/healthz", "/healthz/", "/api", "/api/", "/nope", "/api/v2/receipts/", "/readyz")
METHODS = ("GET", "POST", "PUT", "DELETE")
UNSTABLE_HEADERS = {"date", "x-request-id", "server", "set-cookie"}


def _both_forms(path: str) -> tuple[str, str]:
    return path, path.removesuffix("/") if path.endswith("/") else path + "/"


def _answer(response: httpx.Response) -> dict[str, Any]:
    headers = sorted(
        [name, value]
        for name, value in response.headers.multi_items()
        if name not in UNSTABLE_HEADERS
    )
    return {"status": response.status_code, "headers": headers, "body": response.text}


def _requests(keys: dict[str, str]) -> list[tuple[str, str, dict[str, str], bytes]]:
    """(method, path, headers, body) of every request compared."""
    json_type = {"Content-Type": "application/json"}
    body = json.dumps(receipt_doc(receiptNumber=None)).encode()
    callers = {
        "none": {},
        "wrong": {"Authorization": "Token kt_wrong"},
        "bare-wrong": {"Authorization": "kt_wrong"},
        "bearer": {"Authorization": "Bearer not-a-token"},
        "bearer+app": {"Authorization": "Bearer not-a-token", "SERVICE_APIKEY": keys["reader"]},
        "app-key": {"Service-Apikey": keys["issuer"]},
        "merchant": {"Authorization": f"Token {keys['merchant']}"},
        "reader": {"Authorization": keys["reader"]},
        "issuer": {"Authorization": keys["issuer"]},
    }
    requests = []
    for path in API_PATHS:
        for form in _both_forms(path):
            for method in METHODS:
                for caller in callers.values():
                    requests.append((method, form, {**caller, **json_type}, body))
    for path in OTHER_PATHS:
        for method in METHODS:
            requests.append((method, path, {}, b""))
    merchant = callers["merchant"]
    reader = callers["reader"]
    for form in _both_forms("/api/v1/receipts/"):
        requests += [
            ("POST", form, merchant, body),
            ("POST", form, {**merchant, "Content-Type": "text/plain"}, body),
            ("POST", form, {**merchant, **json_type, "Idempotency-Key": "k" * 300}, body),
            ("POST", form, {**merchant, **json_type}, b"{not json"),
            ("POST", form, {**merchant, **json_type}, b"[]"),
            ("GET", form + "?limit=0", reader, b""),
            ("GET", form + "?cursor=nonsense", reader, b""),
            ("GET", form + "?since=2026-01-01T00:00:00", reader, b""),
            ("GET", form + "?limit=0", {}, b""),
        ]
    read = f"/api/v1/receipts/{UUID}/service_pdf/"
    for form in _both_forms(read):
        requests += [
            ("GET", form + "?layout=wide", reader, b""),
            ("GET", form + "?lang=" + "x" * 20, reader, b""),
            ("GET", form + "?layout=wide", {}, b""),
            ("GET", form, {**reader, "If-None-Match": '"x"'}, b""),
        ]
    requests.append(("GET", "/openapi.json", {}, b""))
    return requests


def test_the_routes_answer_as_before(client: httpx.Client, services: Services) -> None:
    keys = {
        "merchant": make_partner(services).api_key,
        "reader": make_partner(services, PartnerRole.MERCHANT, name="Lukija Oy").api_key,
        "issuer": make_partner(services, PartnerRole.CARD_ISSUER, name="Pankki Oy").api_key,
    }
    answers = [
        [method, path, sorted(h for h in headers if h != "SERVICE_APIKEY"),
         _answer(client.request(method, path, headers=headers, content=body))]
        for method, path, headers, body in _requests(keys)
    ]  # fmt: skip
    if os.environ.get("KUITTI_RECORD_ANSWERS"):
        EXPECTED.write_text(json.dumps(answers, indent=0, ensure_ascii=False) + "\n")
    expected = json.loads(EXPECTED.read_text())
    assert len(answers) == len(expected)
    for answer, wanted in zip(answers, expected, strict=True):
        assert answer == wanted
