"""Endpoints 1–2: creating receipts through the HTTP API."""

from __future__ import annotations

import json
import uuid
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from kuitti.models import IdempotencyRecord, PartnerRole, Receipt, ReceiptLink
from kuitti.receipts.validation import canonical_hash
from kuitti.services import Services
from tests.factories import (
    auth,
    card_payment,
    make_partner,
    many_rows,
    product_row,
    receipt_doc,
    token_body,
)

URL = "/api/v1/receipts/"

# Invalid bodies, shared with the dry run's test (tests/receipts/test_dry_run.py).
MALFORMED_JSON = {
    "empty": b"",
    "truncated": b"{",
    "text": b"not json",
    "not-utf8": b"\xff\xfe\xfa",
    "trailing-comma": b'{"a": 1,}',
    "deep-nesting": b"[" * 100_000,
}
NOT_AN_OBJECT: dict[str, Any] = {"array": [], "string": "receipt", "num": 12, "null": None}
# (token, a fragment of the error's text)
MALFORMED_TOKENS: list[tuple[Any, str]] = [
    ({"type": "CARD", "value": "415301******1234"}, "id"),
    ({"type": "DYNAMIC_QR_CODE", "value": "abc"}, "namespace"),
    ({"type": "RECEIPT_ID", "value": "abc"}, "namespace"),
    ({"type": "EMAIL", "value": "not-an-address"}, "e-mail"),
    ({"type": "USER", "token": "not.a.jwt"}, "JSON Web Token"),
    ({"type": "USER"}, "token"),
    ({"type": "PIGEON", "value": "x"}, "type"),
    ({"value": "x"}, "type"),
    ("RECEIPT_ID", "object"),
    ({"type": "EMAIL", "value": 5}, "value"),
]


def receipt_count(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(Receipt)) or 0


def post(client: httpx.Client, key: str, body: Any, **headers: str) -> httpx.Response:
    return client.post(URL, json=body, headers={**auth(key), **headers})


@pytest.mark.postgres_only
def test_a_long_document_is_stored_compressed_with_lz4(
    client: httpx.Client, services: Services
) -> None:
    """Migration 0002: LZ4 costs the server half the CPU of pglz per stored receipt."""
    merchant = make_partner(services)
    doc = receipt_doc(many_rows(60))
    receipt_id = post(client, merchant.api_key, doc).json()["receipt_id"]
    with services.db.session(write=False) as session:
        method, document = session.execute(
            select(func.pg_column_compression(Receipt.document), Receipt.document).where(
                Receipt.id == uuid.UUID(receipt_id)
            )
        ).one()
    assert method == "lz4"
    assert orjson.loads(document) == doc


class TestCardLinkingForm:
    def test_success_body(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = post(client, merchant.api_key, receipt_doc())
        assert response.status_code == 200
        assert response.headers["content-type"] == "application/json"
        body = response.json()
        assert uuid.UUID(body["receipt_id"])
        assert body["receipt_links"] == []
        assert body["tokens"] == []
        assert body["receipt_web_url"].startswith(f"{services.settings.link_base}/r/")

    def test_without_trailing_slash(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = client.post(
            "/api/v1/receipts", json=receipt_doc(), headers=auth(merchant.api_key)
        )
        assert response.status_code == 200
        assert receipt_count(services) == 1

    def test_stored_exactly_as_posted_with_unknown_keys(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        doc = receipt_doc(loyaltyProgram={"tier": "gold", "points": 12})
        doc["products"][0]["myOwnField"] = [1, "two", None]
        receipt_id = post(client, merchant.api_key, doc).json()["receipt_id"]
        with services.db.session(write=False) as session:
            stored = session.get(Receipt, uuid.UUID(receipt_id))
            assert stored is not None
            assert orjson.loads(stored.document) == doc
            assert stored.merchant_name == "Kauppa Oy"
            assert stored.total == doc["totalPriceIncVAT"]
            assert stored.currency == "EUR"

    def test_bare_key_is_accepted(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = client.post(URL, json=receipt_doc(), headers={"Authorization": merchant.api_key})
        assert response.status_code == 200

    def test_payments_may_be_absent(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        assert post(client, merchant.api_key, receipt_doc(payments=None)).status_code == 200

    def test_return_receipt_payments_need_not_match(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        doc = receipt_doc(type="RETURN", payments=[card_payment(-100)])
        assert post(client, merchant.api_key, doc).status_code == 200

    def test_categorization_sub_as_integer_or_digits(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        rows = [
            product_row("A", categorization={"product": "coffee", "sub": 12}),
            product_row("B", categorization={"product": "coffee", "sub": "34"}),
        ]
        assert post(client, merchant.api_key, receipt_doc(rows)).status_code == 200


class TestAuthentication:
    def test_missing_key_is_401(self, client: httpx.Client, services: Services) -> None:
        response = client.post(URL, json=receipt_doc())
        assert response.status_code == 401
        assert response.json()["error"] == "unauthorized"
        assert "decription" in response.json()

    def test_wrong_key_is_401(self, client: httpx.Client, services: Services) -> None:
        make_partner(services)
        assert post(client, "kt_not-a-real-key", receipt_doc()).status_code == 401

    def test_bearer_is_not_a_merchant_key(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = client.post(
            URL, json=receipt_doc(), headers={"Authorization": f"Bearer {merchant.api_key}"}
        )
        assert response.status_code == 401

    def test_partner_without_merchant_role_is_403(
        self, client: httpx.Client, services: Services
    ) -> None:
        app_partner = make_partner(services, PartnerRole.APP, name="Expense App")
        response = post(client, app_partner.api_key, receipt_doc())
        assert response.status_code == 403
        assert response.json()["error"] == "forbidden"
        assert receipt_count(services) == 0


class TestRequestShape:
    def test_non_json_content_type_is_415(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = client.post(
            URL,
            content=orjson.dumps(receipt_doc()),
            headers={**auth(merchant.api_key), "Content-Type": "text/plain"},
        )
        assert response.status_code == 415
        assert response.json()["error"] == "unsupported_media_type"

    def test_json_with_charset_is_fine(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = client.post(
            URL,
            content=orjson.dumps(receipt_doc()),
            headers={**auth(merchant.api_key), "Content-Type": "application/json; charset=utf-8"},
        )
        assert response.status_code == 200

    def test_oversize_body_is_413_and_stores_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        doc = receipt_doc(freeText="x" * (services.settings.max_body_bytes + 10))
        response = post(client, merchant.api_key, doc)
        assert response.status_code == 413
        assert response.json()["error"] == "payload_too_large"
        assert receipt_count(services) == 0

    def test_oversize_chunked_body_is_413(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)

        def chunks() -> Any:
            for _ in range(300):
                yield b"x" * 4096

        response = client.post(
            URL,
            content=chunks(),
            headers={**auth(merchant.api_key), "Content-Type": "application/json"},
        )
        assert response.status_code == 413

    @pytest.mark.parametrize("raw", MALFORMED_JSON.values(), ids=MALFORMED_JSON.keys())
    def test_malformed_json(self, client: httpx.Client, services: Services, raw: bytes) -> None:
        merchant = make_partner(services)
        response = client.post(
            URL, content=raw, headers={**auth(merchant.api_key), "Content-Type": "application/json"}
        )
        assert response.status_code == 400
        assert response.json()["error"] == "malformed_json"

    @pytest.mark.parametrize("body", NOT_AN_OBJECT.values(), ids=NOT_AN_OBJECT.keys())
    def test_body_of_wrong_json_type(
        self, client: httpx.Client, services: Services, body: Any
    ) -> None:
        merchant = make_partner(services)
        response = client.post(
            URL,
            content=orjson.dumps(body),
            headers={**auth(merchant.api_key), "Content-Type": "application/json"},
        )
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_type"

    def test_huge_array_is_rejected_cleanly(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        doc = receipt_doc(customAttributes=[{"k": "v"}] * 20_000)
        response = post(client, merchant.api_key, doc)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_value"
        assert "customAttributes" in response.json()["decription"]


class TestTokenForm:
    def test_receipt_id_creates_a_link(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        body = token_body(
            receipt_doc(), {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-1/ä"}
        )
        response = post(client, merchant.api_key, body)
        assert response.status_code == 200, response.text
        data = response.json()
        assert data["receipt_links"] == [f"{services.settings.link_base}/ns/kauppa/r/R-1%2F%C3%A4"]
        assert data["tokens"] == [{"type": "RECEIPT_ID", "status": "link_created"}]

    def test_foreign_namespace_is_unknown_namespace(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_partner(services, namespaces=["theirs"], name="Other")
        merchant = make_partner(services, namespaces=["kauppa"])
        body = token_body(
            receipt_doc(), {"type": "RECEIPT_ID", "namespace": "theirs", "value": "1"}
        )
        response = post(client, merchant.api_key, body)
        assert response.status_code == 400
        assert response.json()["error"] == "unknown_namespace"
        assert receipt_count(services) == 0

    def test_unchanged_resend_returns_the_original_id(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-77"}
        first = post(client, merchant.api_key, token_body(receipt_doc(), token)).json()
        # Same receipt with its keys in another order: still the same receipt as JSON.
        reordered = dict(reversed(list(receipt_doc().items())))
        again = post(client, merchant.api_key, token_body(reordered, token))
        assert again.status_code == 200
        assert again.json()["receipt_id"] == first["receipt_id"]
        assert again.json()["receipt_links"] == first["receipt_links"]
        assert again.json()["tokens"] == first["tokens"]
        assert receipt_count(services) == 1

    def test_changed_receipt_under_used_id_is_duplicate(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-77"}
        assert post(client, merchant.api_key, token_body(receipt_doc(), token)).status_code == 200
        changed = receipt_doc(receiptNumber="R-2026-0002")
        response = post(client, merchant.api_key, token_body(changed, token))
        assert response.status_code == 400
        assert response.json()["error"] == "duplicate_receipt_id"
        assert receipt_count(services) == 1

    def test_a_resend_spelled_otherwise_is_unchanged_and_a_value_changed_is_not(
        self, client: httpx.Client, services: Services
    ) -> None:
        """Equal as JSON: escapes and whitespace may differ, values may not (the resend is
        compared with the hash stored with the first post)."""
        merchant = make_partner(services, namespaces=["kauppa"])
        token = {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-78"}
        doc = receipt_doc(freeText="Kiitos käynnistä!")
        headers = {**auth(merchant.api_key), "Content-Type": "application/json"}
        first = client.post(URL, content=orjson.dumps(token_body(doc, token)), headers=headers)
        escaped = json.dumps(token_body(doc, token), indent=3, ensure_ascii=True).encode()
        assert b"\\u00e4" in escaped
        again = client.post(URL, content=escaped, headers=headers)
        assert again.status_code == 200
        assert again.json()["receipt_id"] == first.json()["receipt_id"]
        changed = token_body(receipt_doc(freeText="Kiitos käynnistä."), token)
        refused = client.post(URL, content=orjson.dumps(changed), headers=headers)
        assert refused.json()["error"] == "duplicate_receipt_id"
        assert receipt_count(services) == 1

    def test_only_a_receipt_under_receipt_ids_keeps_a_hash_of_its_document(
        self, client: httpx.Client, services: Services
    ) -> None:
        """The hash is what a resend is compared with, and only a RECEIPT_ID names a receipt
        for a resend; the others skip it. Plain rows and the ORM path (an EMAIL token) alike."""
        merchant = make_partner(services, namespaces=["kauppa"])
        email = {"type": "EMAIL", "value": "maija@example.com"}
        bodies = {
            "bare": receipt_doc(),
            "email": token_body(receipt_doc(), email),
            "link": token_body(
                receipt_doc(), {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-79"}
            ),
            "link and email": token_body(
                receipt_doc(), {"type": "RECEIPT_ID", "namespace": "kauppa", "value": "R-80"}, email
            ),
        }
        hashes = {}
        for name, body in bodies.items():
            response = post(client, merchant.api_key, body)
            assert response.status_code == 200, response.text
            receipt_id = uuid.UUID(response.json()["receipt_id"])
            with services.db.session(write=False) as session:
                hashes[name] = session.scalar(
                    select(Receipt.document_hash).where(Receipt.id == receipt_id)
                )
        assert hashes["bare"] == hashes["email"] == ""
        assert hashes["link"] == hashes["link and email"] == canonical_hash(receipt_doc())

    def test_same_identifier_in_two_namespaces(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services, namespaces=["north", "south"])
        for namespace in ("north", "south"):
            token = {"type": "RECEIPT_ID", "namespace": namespace, "value": "same"}
            assert (
                post(client, merchant.api_key, token_body(receipt_doc(), token)).status_code == 200
            )
        assert receipt_count(services) == 2

    @pytest.mark.parametrize(("token", "fragment"), MALFORMED_TOKENS)
    def test_malformed_tokens(
        self, client: httpx.Client, services: Services, token: Any, fragment: str
    ) -> None:
        merchant = make_partner(services, namespaces=["kauppa"])
        response = post(client, merchant.api_key, token_body(receipt_doc(), token))
        assert response.status_code == 400
        error = response.json()
        assert error["error"] == "invalid_token"
        assert error["decription"].startswith("attributes.tokens[0]")
        assert fragment in error["decription"]
        assert receipt_count(services) == 0

    def test_tokens_not_an_array(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        body = {"attributes": {"tokens": {"type": "EMAIL"}}, "receipt": receipt_doc()}
        response = post(client, merchant.api_key, body)
        assert response.status_code == 400
        assert response.json()["error"] == "invalid_type"

    def test_token_form_without_receipt(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = post(client, merchant.api_key, {"attributes": {"tokens": []}})
        assert response.status_code == 400
        assert response.json() == {
            "error": "missing_field",
            "decription": "receipt: this field is required.",
        }

    def test_token_and_receipt_errors_reported_together(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        doc = receipt_doc()
        del doc["receiptNumber"]
        response = post(client, merchant.api_key, token_body(doc, {"type": "CARD", "value": "1"}))
        assert response.status_code == 400
        codes = {(e["error"], e["decription"].split(":")[0]) for e in response.json()}
        assert codes == {
            ("invalid_token", "attributes.tokens[0]"),
            ("missing_field", "receipt.receiptNumber"),
        }


class TestIdempotency:
    def test_same_key_same_body_returns_first_response(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        first = post(client, merchant.api_key, receipt_doc(), **{"Idempotency-Key": "k-1"})
        second = post(client, merchant.api_key, receipt_doc(), **{"Idempotency-Key": "k-1"})
        assert first.status_code == second.status_code == 200
        assert second.json() == first.json()
        assert receipt_count(services) == 1

    def test_same_key_other_body_is_409(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        post(client, merchant.api_key, receipt_doc(), **{"Idempotency-Key": "k-1"})
        other = post(
            client,
            merchant.api_key,
            receipt_doc(receiptNumber="other"),
            **{"Idempotency-Key": "k-1"},
        )
        assert other.status_code == 409
        assert other.json()["error"] == "idempotency_key_reused"
        assert receipt_count(services) == 1

    def test_keys_are_per_partner(self, client: httpx.Client, services: Services) -> None:
        one = make_partner(services, name="One")
        two = make_partner(services, name="Two")
        a = post(client, one.api_key, receipt_doc(), **{"Idempotency-Key": "shared"})
        b = post(client, two.api_key, receipt_doc(), **{"Idempotency-Key": "shared"})
        assert a.json()["receipt_id"] != b.json()["receipt_id"]
        assert receipt_count(services) == 2

    def test_rejected_request_records_no_key(
        self, client: httpx.Client, services: Services
    ) -> None:
        merchant = make_partner(services)
        bad = receipt_doc()
        bad["totalPriceIncVAT"] += 1
        response = post(client, merchant.api_key, bad, **{"Idempotency-Key": "k-2"})
        assert response.status_code == 400
        with services.db.session(write=False) as session:
            assert session.scalar(select(func.count()).select_from(IdempotencyRecord)) == 0
        # The key is still free for the corrected request.
        assert (
            post(client, merchant.api_key, receipt_doc(), **{"Idempotency-Key": "k-2"}).status_code
            == 200
        )

    def test_overlong_key_is_rejected(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        response = post(client, merchant.api_key, receipt_doc(), **{"Idempotency-Key": "k" * 300})
        assert response.status_code == 400
        assert receipt_count(services) == 0


def test_links_are_stored_once(client: httpx.Client, services: Services) -> None:
    merchant = make_partner(services, namespaces=["kauppa"])
    tokens = [{"type": "RECEIPT_ID", "namespace": "kauppa", "value": f"id-{i}"} for i in range(3)]
    response = post(client, merchant.api_key, token_body(receipt_doc(), *tokens))
    assert response.status_code == 200
    assert len(response.json()["receipt_links"]) == 3
    with services.db.session(write=False) as session:
        assert session.scalar(select(func.count()).select_from(ReceiptLink)) == 3
