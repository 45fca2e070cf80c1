"""Health, readiness, metrics, request ids, OpenAPI, and the ASGI app driven in-process."""

from __future__ import annotations

from pathlib import Path

import anyio
import httpx
import orjson
from pydantic import BaseModel

from kuitti.app import create_app
from kuitti.cards.routes import Card, CardRemoved, CardTransactionRecorded
from kuitti.clock import FrozenClock
from kuitti.db import Database
from kuitti.delivery.routes import QrCode
from kuitti.models import PartnerRole
from kuitti.oauth.routes import AccessToken, Revoked
from kuitti.receipts.answers import ReceiptCreated, ReceiptList, ReceiptValid
from kuitti.services import Services
from tests.conftest import make_settings
from tests.factories import auth, make_partner, metric, receipt_doc, token_body


def test_health_and_readiness(client: httpx.Client) -> None:
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/readyz").json() == {"status": "ready"}


def test_not_ready_on_an_unmigrated_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'empty.db'}"
    settings = make_settings(url, tmp_path, "http://127.0.0.1:1")
    app = create_app(settings, db=Database(url), clock=FrozenClock())

    async def ask() -> httpx.Response:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kuitti") as http:
            return await http.get("/readyz")

    response = anyio.run(ask)
    assert response.status_code == 503
    assert "kuitti db upgrade" in response.json()["reason"]


def test_asgi_app_in_process(services: Services) -> None:
    """The same app, driven through httpx's ASGI transport rather than a socket."""
    merchant = make_partner(services)
    app = create_app(services.settings, db=services.db, clock=services.clock)

    async def roundtrip() -> tuple[int, int]:
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://kuitti") as http:
            created = await http.post(
                "/api/v1/receipts/", json=receipt_doc(), headers=auth(merchant.api_key)
            )
            receipt_id = created.json()["receipt_id"]
            read = await http.get(
                f"/api/v1/receipts/{receipt_id}/service_json/", headers=auth(merchant.api_key)
            )
            return created.status_code, read.status_code

    assert anyio.run(roundtrip) == (200, 200)


def test_request_id_is_echoed_or_made(client: httpx.Client) -> None:
    given = client.get("/healthz", headers={"X-Request-ID": "pos-7.abc_123"})
    assert given.headers["x-request-id"] == "pos-7.abc_123"
    made = client.get("/healthz", headers={"X-Request-ID": "bad id\twith spaces"})
    assert made.headers["x-request-id"] != "bad id\twith spaces"
    assert len(made.headers["x-request-id"]) == 32


def test_metrics_count_requests(client: httpx.Client) -> None:
    client.get("/healthz")
    text = client.get("/metrics").text
    assert 'kuitti_http_requests_total{method="GET",route="/healthz",status="200"}' in text


def test_metrics_count_each_request_under_its_route_and_status(client: httpx.Client) -> None:
    ok = 'kuitti_http_requests_total{method="GET",route="/healthz",status="200"}'
    timed = 'kuitti_http_request_duration_seconds_count{method="GET",route="/healthz"}'
    missing = 'kuitti_http_requests_total{method="GET",route="unmatched",status="404"}'
    before = [metric(client, sample) for sample in (ok, timed, missing)]
    for _ in range(3):
        client.get("/healthz")
    for _ in range(2):
        client.get("/api/v1/nothing-here")
    after = [metric(client, sample) for sample in (ok, timed, missing)]
    assert [a - b for a, b in zip(after, before, strict=True)] == [3, 3, 2]


def test_metrics_count_each_new_receipt_once(client: httpx.Client, services: Services) -> None:
    """``kuitti_receipts_created_total`` counts stored receipts: not resends, idempotent
    replays or refused posts."""
    created = "kuitti_receipts_created_total"
    merchant = make_partner(services, namespaces=["kauppa"])
    headers = auth(merchant.api_key)
    token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "M-1"}

    def post(body: object, **extra: str) -> int:
        return client.post("/api/v1/receipts/", json=body, headers={**headers, **extra}).status_code

    before = metric(client, created)
    assert post(token_body(receipt_doc(), token)) == 200
    assert metric(client, created) - before == 1
    assert post(token_body(receipt_doc(), token)) == 200  # an unchanged resend
    assert post(receipt_doc(), **{"Idempotency-Key": "m-1"}) == 200
    assert metric(client, created) - before == 2
    assert post(receipt_doc(), **{"Idempotency-Key": "m-1"}) == 200  # its replay
    assert post(receipt_doc(receiptNumber="other"), **{"Idempotency-Key": "m-1"}) == 409
    assert post({"receipt": "not a receipt"}) == 400
    assert metric(client, created) - before == 2


def test_unknown_path_is_json_404(client: httpx.Client) -> None:
    response = client.get("/api/v1/nothing-here")
    assert response.status_code == 404
    assert response.json()["error"] == "not_found"


def test_wrong_method_is_json_405(client: httpx.Client) -> None:
    response = client.put("/api/v1/receipts/")
    assert response.status_code == 405
    assert response.json()["error"] == "method_not_allowed"


def test_openapi_describes_the_receipt_document(client: httpx.Client) -> None:
    spec = client.get("/openapi.json").json()
    assert "/api/v1/receipts/" in spec["paths"]
    assert "/api/v1/receipts/{receipt_id}/{data_format}/" in spec["paths"]
    schemas = spec["components"]["schemas"]
    receipt = schemas["Receipt"]
    assert set(receipt["required"]) >= {
        "merchant", "products", "vats", "receiptNumber", "receiptTimeStamp",
        "currencyISOCode", "totalVATAmount", "totalPriceExcVAT", "totalPriceIncVAT",
    }  # fmt: skip
    assert receipt["properties"]["receiptNumber"]["description"]
    assert "Unique branch identifier" in schemas["Branch"]["properties"]["id"]["description"]
    assert {"CardAttributes", "Journey", "Attachment", "Verification"} <= set(schemas)
    body = spec["paths"]["/api/v1/receipts/"]["post"]["requestBody"]
    refs = orjson.dumps(body).decode()
    assert "#/components/schemas/Receipt" in refs
    assert "#/components/schemas/TokenReceiptRequest" in refs


def test_interactive_docs(client: httpx.Client) -> None:
    response = client.get("/docs")
    assert response.status_code == 200
    assert "swagger" in response.text.lower()


def test_openapi_security_and_errors(client: httpx.Client) -> None:
    """Each API operation says how to authenticate and what its errors look like; no 422."""
    spec = client.get("/openapi.json").json()
    schemes = spec["components"]["securitySchemes"]
    assert schemes["MerchantToken"]["name"] == "Authorization"
    assert schemes["ServiceApiKey"]["name"] == "SERVICE_APIKEY"
    assert schemes["Bearer"]["scheme"] == "bearer"
    assert "HTTPValidationError" not in spec["components"]["schemas"]
    create = spec["paths"]["/api/v1/receipts/"]["post"]
    assert create["security"] == [{"MerchantToken": []}]
    read = spec["paths"]["/api/v1/receipts/{receipt_id}/{data_format}/"]["get"]
    assert read["security"] == [{"PartnerKey": []}, {"ServiceApiKey": [], "Bearer": []}]
    headers = {p["name"].lower() for p in read["parameters"] if p["in"] == "header"}
    assert headers == {"accept-language", "if-none-match"}
    edge = {f"#/components/responses/{n}": r for n, r in spec["components"]["responses"].items()}
    for path, operations in spec["paths"].items():
        for method, operation in operations.items():
            # What the edge answers on any path is declared once and referenced (docs/api.md).
            assert operation["responses"]["431"] == {
                "$ref": "#/components/responses/HeadersTooLarge"
            }, (method, path)
            assert "422" not in operation["responses"], (method, path)
            if path.startswith("/api/"):
                assert "security" in operation, (method, path)
                for status, answer in operation["responses"].items():
                    if status.startswith("4"):
                        response = edge.get(answer.get("$ref"), answer)
                        schema = response["content"]["application/json"]["schema"]
                        assert schema == {"$ref": "#/components/schemas/Errors"}
    token_body = spec["paths"]["/api/oauth/token"]["post"]["requestBody"]["content"]
    form = token_body["application/x-www-form-urlencoded"]["schema"]
    assert {"grant_type", "code", "redirect_uri", "client_id"} <= set(form["properties"])


def test_errors_match_the_documented_schema(client: httpx.Client) -> None:
    """What the 401 of a create looks like is what the OpenAPI document promises."""
    spec = client.get("/openapi.json").json()
    error = spec["components"]["schemas"]["Error"]
    answer = client.post("/api/v1/receipts/", json={}).json()
    assert set(answer) == set(error["required"])


def test_documented_answers_match_real_ones(client: httpx.Client, services: Services) -> None:
    """The 200 schemas in /openapi.json are the shapes the service really answers with."""
    spec = client.get("/openapi.json").json()
    declared_on_routes: dict[tuple[str, str], type[BaseModel]] = {
        ("post", "/api/v1/receipts/"): ReceiptCreated,
        ("post", "/api/v1/receipts/validate"): ReceiptValid,
        ("get", "/api/v1/receipts/"): ReceiptList,
        ("post", "/api/v1/qr-codes/"): QrCode,
        ("post", "/api/oauth/token"): AccessToken,
        ("delete", "/api/oauth/revoke"): Revoked,
        ("post", "/api/v1/cards/"): Card,
        ("delete", "/api/v1/cards/{service_card_id}/"): CardRemoved,
        ("post", "/api/v1/card-transactions/"): CardTransactionRecorded,
    }
    for (method, path), model in declared_on_routes.items():
        content = spec["paths"][path][method]["responses"]["200"]["content"]
        ref = f"#/components/schemas/{model.__name__}"
        assert content == {"application/json": {"schema": {"$ref": ref}}}, (method, path)
    merchant = make_partner(services, namespaces=["kauppa"])
    body = token_body(receipt_doc(), {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "A-1"})
    created = client.post("/api/v1/receipts/", json=body, headers=auth(merchant.api_key))
    assert created.status_code == 200
    ReceiptCreated.model_validate(created.json(), strict=True)
    listed = client.get("/api/v1/receipts/", headers={"Authorization": merchant.api_key})
    page = ReceiptList.model_validate(listed.json(), strict=True)
    assert [r.receipt_id for r in page.receipts] == [created.json()["receipt_id"]]

    issuer = {"Authorization": make_partner(services, PartnerRole.CARD_ISSUER).api_key}
    card_body = {"partner_card_id": "c-1", "masked_pan": "415301******1234", "exp_date": "2028-12"}
    enrolled = client.post("/api/v1/cards/", json=card_body, headers=issuer)
    card = Card.model_validate(enrolled.json(), strict=True)
    assert set(enrolled.json()) == set(Card.model_fields) - {"name"}
    transaction = {
        "partner_card_id": "c-1",
        "transaction_type": "auth",
        "amount": 1198,
        "currency": "EUR",
        "timestamp": "2026-01-15T14:03:11+02:00",
        "merchant_id": "MID-1",
        "merchant_name": "Kauppa Oy",
    }
    recorded = client.post("/api/v1/card-transactions/", json=transaction, headers=issuer)
    CardTransactionRecorded.model_validate(recorded.json(), strict=True)
    assert set(recorded.json()) == set(CardTransactionRecorded.model_fields)
    removed = client.delete(f"/api/v1/cards/{card.service_card_id}/", headers=issuer)
    assert CardRemoved.model_validate(removed.json(), strict=True).deleted
    assert set(removed.json()) == set(CardRemoved.model_fields)
