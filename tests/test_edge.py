"""The checks every request passes before a route sees it: the body limit (JSON and forms,
chunked or not) and NUL in paths, queries and forms."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest

from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.factories import auth, make_partner, receipt_doc, token_body

FORM_POSTS = [
    "/login",
    "/signup",
    "/logout",
    "/password-reset",
    "/password-reset/sometoken",
    "/verify-email",
    "/account/delete",
    "/account/connections/0b5e1f2a-0000-4000-8000-000000000000/remove",
    "/r/sometoken",
    "/ns/kauppa/r/1234",
    "/auth",
    "/membership",
]


def chunked(total_bytes: int) -> Iterator[bytes]:
    """A urlencoded form body sent in chunks, with no Content-Length."""
    sent = 0
    index = 0
    while sent < total_bytes:
        chunk = f"f{index}=".encode() + b"x" * 65536 + b"&"
        index += 1
        sent += len(chunk)
        yield chunk


class TestBodyLimit:
    @pytest.mark.parametrize("path", FORM_POSTS)
    def test_chunked_form_past_the_limit_is_413(
        self, client: httpx.Client, services: Services, path: str
    ) -> None:
        response = client.post(
            path,
            content=chunked(services.settings.max_body_bytes + 100_000),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert response.status_code == 413
        assert response.json()["error"] == "payload_too_large"

    def test_declared_form_past_the_limit_is_413(
        self, client: httpx.Client, services: Services
    ) -> None:
        response = client.post(
            "/login", data={"email": "x" * (services.settings.max_body_bytes + 1)}
        )
        assert response.status_code == 413

    def test_token_endpoint_chunked_past_the_limit_is_413(
        self, client: httpx.Client, services: Services
    ) -> None:
        response = client.post(
            "/api/oauth/token",
            content=chunked(services.settings.max_body_bytes + 100_000),
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert response.status_code == 413

    def test_a_form_under_the_limit_still_reaches_the_route(self, client: httpx.Client) -> None:
        # No CSRF token: the route itself answers (403), the edge let it through.
        response = client.post("/login", data={"email": "a@example.com", "f": "x" * 500_000})
        assert response.status_code == 403


class TestNul:
    """PostgreSQL cannot store U+0000 in text; every route answers 4xx, never 5xx."""

    @pytest.mark.parametrize(
        "path",
        [
            "/ns/kauppa/r/a%00b",
            "/ns/a%00b/r/x",
            "/r/a%00b",
            "/r/a%00b/pdf",
            "/verify-email/a%00b",
            "/password-reset/a%00b",
            "/api/v1/receipts/a%00b/service_json/",
            "/membership%00",
        ],
    )
    def test_nul_in_a_path_is_404(self, client: httpx.Client, path: str) -> None:
        response = client.get(path)
        assert response.status_code == 404

    @pytest.mark.parametrize(
        "url",
        [
            "/auth?client_id=a%00b&response_type=code",
            "/api/v1/receipts/?cursor=a%00b",
            "/login?next=/a%00b",
            "/membership?client_id=a%00b",
            "/ns/kauppa/r/1?lang=f%00i",
        ],
    )
    def test_nul_in_a_query_is_400(self, client: httpx.Client, url: str) -> None:
        response = client.get(url)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_value"

    def test_nul_in_token_form_is_400(self, client: httpx.Client) -> None:
        response = client.post(
            "/api/oauth/token",
            data={"grant_type": "authorization_code", "client_id": "a\x00b", "code": "x"},
        )
        assert response.status_code == 400

    def test_nul_in_token_json_is_400(self, client: httpx.Client) -> None:
        response = client.post(
            "/api/oauth/token",
            content=b'{"grant_type": "authorization_code", "client_id": "a\\u0000b", "code": "x"}',
            headers={"Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_request"

    def test_nul_in_token_basic_credentials_is_401(self, client: httpx.Client) -> None:
        basic = base64.b64encode(b"a\x00b:secret").decode()
        response = client.post(
            "/api/oauth/token",
            data={"grant_type": "authorization_code", "code": "x"},
            headers={"Authorization": f"Basic {basic}"},
        )
        assert response.status_code == 401
        assert response.json()["error"] == "invalid_client"

    @pytest.mark.parametrize("path", ["/login", "/signup", "/password-reset", "/auth"])
    def test_nul_in_a_form_is_400(self, client: httpx.Client, path: str) -> None:
        response = client.post(path, data={"email": "a\x00@example.com", "client_id": "a\x00"})
        assert response.status_code == 400

    def test_nul_in_an_api_key_header_is_refused(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_partner(services)
        response = client.get("/api/v1/receipts/", headers={"Authorization": "Token a%00b\\u0000"})
        assert response.status_code == 401


def splice(document: dict[str, Any], key: str, raw: str) -> bytes:
    """The document as JSON text with ``"key": <raw>`` added verbatim at the top level."""
    text = orjson.dumps(document).decode()
    return f'{text[:-1]}, "{key}": {raw}}}'.encode()


def readme_receipt() -> dict[str, Any]:
    return receipt_doc()


class TestJsonKeptExactly:
    """A body that could not be stored exactly as posted is a 400, never a 500 nor a silent
    change, wherever it hides, on both databases."""

    @pytest.mark.parametrize(
        ("key", "raw", "code"),
        [
            ("deep", "[" * 300 + "1" + "]" * 300, "malformed_json"),
            ("deep", '{"a":' * 300 + "1" + "}" * 300, "malformed_json"),
            ("lone", '"\\ud800"', "invalid_value"),
            ("nul", '"a\\u0000b"', "invalid_value"),
            ("a\\u0000b", "1", "invalid_value"),
            ("big", "18446744073709551616", "invalid_value"),
            ("big", "9223372036854775808", "invalid_value"),
            ("small", "-9223372036854775809", "invalid_value"),
            ("huge", "1e400", "invalid_value"),
            ("nan", "NaN", "malformed_json"),
            ("inf", "-Infinity", "malformed_json"),
            ("freeText", '"twice"', "invalid_value"),
        ],
        ids=[
            "deep-array",
            "deep-object",
            "lone-surrogate",
            "nul-value",
            "nul-key",
            "beyond-u64",
            "beyond-i64",
            "below-i64",
            "float-overflow",
            "nan",
            "infinity",
            "duplicate-key",
        ],
    )
    def test_receipt_body_is_refused(
        self, client: httpx.Client, services: Services, key: str, raw: str, code: str
    ) -> None:
        merchant = make_partner(services)
        document = readme_receipt()
        document["freeText"] = "once"
        response = client.post(
            "/api/v1/receipts/",
            content=splice(document, key, raw),
            headers={**auth(merchant.api_key), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
        errors = response.json()
        assert (errors if isinstance(errors, list) else [errors])[0]["error"] == code

    def test_the_path_is_named(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        document = readme_receipt()
        document["merchant"]["name"] = "Kauppa\x00Oy"
        response = client.post("/api/v1/receipts/", json=document, headers=auth(merchant.api_key))
        assert response.status_code == 400
        assert response.json()["decription"].startswith("merchant.name:")

    @pytest.mark.parametrize(
        "token",
        [
            {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "a\x00b"},
            {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "a\ud800b"},
            {"type": "CARD", "id": "c\x00", "value": "415301******1234"},
            {"type": "CARD", "id": "c\ud800", "value": "415301******1234"},
        ],
    )
    def test_token_text_is_refused(
        self, client: httpx.Client, services: Services, token: dict[str, str]
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        body = json.dumps(token_body(readme_receipt(), token)).encode()
        response = client.post(
            "/api/v1/receipts/",
            content=body,
            headers={**auth(merchant.api_key), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text

    def test_utf16_body_is_refused(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        for encoding in ("utf-16", "utf-16-le", "utf-32"):
            response = client.post(
                "/api/v1/receipts/",
                content=json.dumps(readme_receipt()).encode(encoding),
                headers={**auth(merchant.api_key), "Content-Type": "application/json"},
            )
            assert response.status_code == 400, encoding
            assert response.json()["error"] == "malformed_json"

    @pytest.mark.parametrize(
        "card",
        [
            {"partner_card_id": "c\x00", "masked_pan": "415301******1234", "exp_date": "2028-12"},
            {"partner_card_id": "c\ud800", "masked_pan": "415301******1234", "exp_date": "2028-12"},
            {
                "partner_card_id": "c",
                "masked_pan": "415301******1234",
                "exp_date": "2028-12",
                "name": "\ud800",
            },
        ],
    )
    def test_card_text_is_refused(
        self, client: httpx.Client, services: Services, card: dict[str, str]
    ) -> None:
        issuer = make_partner(services, PartnerRole.CARD_ISSUER)
        response = client.post(
            "/api/v1/cards/",
            content=json.dumps(card).encode(),
            headers={**auth(issuer.api_key), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text

    def test_card_transaction_text_is_refused(
        self, client: httpx.Client, services: Services
    ) -> None:
        issuer = make_partner(services, PartnerRole.CARD_ISSUER)
        response = client.post(
            "/api/v1/card-transactions/",
            content=json.dumps(
                {
                    "partner_card_id": "c\x00",
                    "transaction_type": "auth",
                    "amount": 100,
                    "currency": "EUR",
                    "timestamp": "2026-01-15T14:03:11+02:00",
                    "merchant_id": "m\x00",
                    "merchant_name": "K\x00",
                }
            ).encode(),
            headers={**auth(issuer.api_key), "Content-Type": "application/json"},
        )
        assert response.status_code == 400, response.text
        assert len(response.json()) == 3
