"""Each token type end to end through the HTTP API (docs/delivery.md)."""

from __future__ import annotations

import threading
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import select

from kuitti.clock import FrozenClock
from kuitti.delivery import qr
from kuitti.models import Connection, DynamicQrCode, PartnerRole, User
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.delivery.support import (
    connect,
    enroll_card,
    mail_rows,
    make_app,
    make_merchant,
    owners,
    post_receipt,
    unverified_user,
    webhooks,
)
from tests.factories import (
    auth,
    make_partner,
    make_user,
    receipt_doc,
    token_body,
)


def statuses(response: httpx.Response) -> list[dict[str, str]]:
    assert response.status_code == 200, response.text
    tokens: list[dict[str, str]] = response.json()["tokens"]
    return tokens


def error_codes(response: httpx.Response) -> list[str]:
    body: Any = response.json()
    items = body if isinstance(body, list) else [body]
    return [item["error"] for item in items]


class TestReceiptIdToken:
    def test_creates_the_namespace_link(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        body = token_body(
            receipt_doc(), {"type": "RECEIPT_ID", "value": "A-1", "namespace": "kauppa"}
        )
        response = post_receipt(client, merchant, body)
        assert statuses(response) == [{"type": "RECEIPT_ID", "status": "link_created"}]
        link = f"{services.settings.link_base}/ns/kauppa/r/A-1"
        assert response.json()["receipt_links"] == [link]
        page = client.get("/ns/kauppa/r/A-1")
        assert page.status_code == 200

    def test_namespace_of_another_partner_is_refused(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        make_merchant(services, "Toinen Oy", namespaces=["toinen"])
        body = token_body(
            receipt_doc(), {"type": "RECEIPT_ID", "value": "A-1", "namespace": "toinen"}
        )
        response = post_receipt(client, merchant, body)
        assert response.status_code == 400
        assert error_codes(response) == ["unknown_namespace"]

    def test_a_used_identifier_with_another_receipt_is_a_duplicate(
        self, client: httpx.Client, merchant: NewPartner
    ) -> None:
        token = {"type": "RECEIPT_ID", "value": "A-1", "namespace": "kauppa"}
        first = post_receipt(client, merchant, token_body(receipt_doc(), token))
        resend = post_receipt(client, merchant, token_body(receipt_doc(), token))
        other = post_receipt(client, merchant, token_body(receipt_doc(receiptNumber="R-2"), token))
        assert resend.json()["receipt_id"] == first.json()["receipt_id"]
        assert other.status_code == 400
        assert error_codes(other) == ["duplicate_receipt_id"]

    def test_racing_posts_of_one_identifier_store_one_receipt(
        self, live_server: Any, services: Services, merchant: NewPartner
    ) -> None:
        token = {"type": "RECEIPT_ID", "value": "RACE-1", "namespace": "kauppa"}
        bodies = [token_body(receipt_doc(receiptNumber=f"R-{i}"), token) for i in range(8)]
        barrier = threading.Barrier(len(bodies))
        results: list[httpx.Response] = []
        lock = threading.Lock()

        def post(body: dict[str, Any]) -> None:
            with httpx.Client(base_url=live_server.url, timeout=30) as http:
                barrier.wait()
                response = post_receipt(http, merchant, body)
            with lock:
                results.append(response)

        threads = [threading.Thread(target=post, args=(b,)) for b in bodies]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        ok = [r for r in results if r.status_code == 200]
        assert len(ok) == 1, [r.text for r in results]
        assert all(error_codes(r) == ["duplicate_receipt_id"] for r in results if r not in ok)

    @pytest.mark.parametrize(
        "token",
        [
            {"type": "RECEIPT_ID", "value": "A-1"},
            {"type": "RECEIPT_ID", "namespace": "kauppa"},
            {"type": "RECEIPT_ID", "value": "x" * 201, "namespace": "kauppa"},
            {"type": "RECEIPT_ID", "value": 12, "namespace": "kauppa"},
        ],
    )
    def test_malformed(self, client: httpx.Client, merchant: NewPartner, token: Any) -> None:
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert response.status_code == 400
        assert error_codes(response) == ["invalid_token"]


class TestDynamicQrCode:
    def test_the_app_gets_a_value_and_the_receipt_reaches_its_user(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        app = make_app(services, namespaces=["kansio", "kansio-2"])
        connected = connect(services, app, user)
        issued = client.post("/api/v1/qr-codes/", headers=connected.app_headers())
        assert issued.status_code == 200, issued.text
        code = issued.json()
        assert code["namespace"] == "kansio"  # the app's first namespace
        assert code["expires_at"] == "2026-01-15T12:10:00Z"  # 600 s after the frozen now
        assert len(code["value"]) >= 22
        # The posting merchant does not own the namespace "kansio".
        token = {"type": "DYNAMIC_QR_CODE", "value": code["value"], "namespace": "kansio"}
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert statuses(response) == [{"type": "DYNAMIC_QR_CODE", "status": "delivered"}]
        assert owners(services, response.json()["receipt_id"]) == [user.id]
        listed = client.get("/api/v1/receipts/", headers=connected.app_headers())
        assert [r["receipt_id"] for r in listed.json()["receipts"]] == [
            response.json()["receipt_id"]
        ]

    def test_is_described_in_openapi(self, client: httpx.Client) -> None:
        paths = client.get("/openapi.json").json()["paths"]
        assert "post" in paths["/api/v1/qr-codes/"]
        assert "get" in paths["/r/{token}"]

    def test_an_app_without_a_namespace_gets_no_value(
        self, client: httpx.Client, services: Services, user: User
    ) -> None:
        connected = connect(services, make_app(services, namespaces=[]), user)
        response = client.post("/api/v1/qr-codes/", headers=connected.app_headers())
        assert response.status_code == 403
        assert response.json()["error"] == "no_namespace"

    def test_the_dashed_header_works_too(
        self, client: httpx.Client, services: Services, user: User
    ) -> None:
        connected = connect(services, make_app(services), user)
        headers = {
            "Service-Apikey": connected.app.api_key,
            "Authorization": f"Bearer {connected.access_token}",
        }
        assert client.post("/api/v1/qr-codes", headers=headers).status_code == 200

    def test_values_are_unique_and_without_slash_twins_differences(
        self, client: httpx.Client, services: Services, user: User
    ) -> None:
        connected = connect(services, make_app(services), user)
        values = {
            client.post(path, headers=connected.app_headers()).json()["value"]
            for path in ("/api/v1/qr-codes/", "/api/v1/qr-codes", "/api/v1/qr-codes/")
        }
        assert len(values) == 3

    def test_expired_value_is_unmatched(
        self,
        client: httpx.Client,
        services: Services,
        clock: FrozenClock,
        merchant: NewPartner,
        user: User,
    ) -> None:
        connected = connect(services, make_app(services), user)
        code = client.post("/api/v1/qr-codes/", headers=connected.app_headers()).json()
        token = {"type": "DYNAMIC_QR_CODE", "value": code["value"], "namespace": "kansio"}
        clock.advance(599)
        fresh = post_receipt(client, merchant, token_body(receipt_doc(receiptNumber="1"), token))
        clock.advance(1)
        late = post_receipt(client, merchant, token_body(receipt_doc(receiptNumber="2"), token))
        assert statuses(fresh) == [{"type": "DYNAMIC_QR_CODE", "status": "delivered"}]
        assert statuses(late) == [{"type": "DYNAMIC_QR_CODE", "status": "unmatched"}]
        assert owners(services, late.json()["receipt_id"]) == []

    def test_lifetime_is_a_setting(self, services: Services, user: User) -> None:

        connected = connect(services, make_app(services), user)
        with services.db.session() as session:
            connection = session.get(Connection, connected.connection_id)
            assert connection is not None
            issued = qr.issue_qr_code(session, connection, ttl_seconds=30, now=services.clock.now())
        assert (issued.expires_at - services.clock.now()).total_seconds() == 30

    @pytest.mark.parametrize("namespace", ["kansio", "kauppa", "nowhere"])
    def test_unknown_value_or_wrong_namespace_is_unmatched(
        self,
        client: httpx.Client,
        services: Services,
        merchant: NewPartner,
        user: User,
        namespace: str,
    ) -> None:
        connected = connect(services, make_app(services), user)
        code = client.post("/api/v1/qr-codes/", headers=connected.app_headers()).json()
        value = "not-a-value-we-gave" if namespace == "kansio" else code["value"]
        token = {"type": "DYNAMIC_QR_CODE", "value": value, "namespace": namespace}
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert statuses(response) == [{"type": "DYNAMIC_QR_CODE", "status": "unmatched"}]

    def test_revoked_connection_is_unmatched(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:

        connected = connect(services, make_app(services), user)
        code = client.post("/api/v1/qr-codes/", headers=connected.app_headers()).json()
        with services.db.session() as session:
            connection = session.get(Connection, connected.connection_id)
            assert connection is not None
            connection.revoked_at = services.clock.now()
        token = {"type": "DYNAMIC_QR_CODE", "value": code["value"], "namespace": "kansio"}
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert statuses(response) == [{"type": "DYNAMIC_QR_CODE", "status": "unmatched"}]

    def test_only_the_hash_of_a_value_is_stored(
        self, client: httpx.Client, services: Services, user: User
    ) -> None:

        connected = connect(services, make_app(services), user)
        value = client.post("/api/v1/qr-codes/", headers=connected.app_headers()).json()["value"]
        with services.db.session(write=False) as session:
            rows = list(session.scalars(select(DynamicQrCode)))
        assert len(rows) == 1
        assert value not in rows[0].value_hash

    @pytest.mark.parametrize(
        "headers",
        [
            {},
            {"Authorization": "Bearer not.a.token"},
            {"SERVICE_APIKEY": "kt_wrong", "Authorization": "Bearer x.y.z"},
        ],
    )
    def test_the_endpoint_needs_an_app_key_and_a_user_token(
        self, client: httpx.Client, headers: dict[str, str]
    ) -> None:
        assert client.post("/api/v1/qr-codes/", headers=headers).status_code == 401

    @pytest.mark.parametrize(
        "token",
        [
            {"type": "DYNAMIC_QR_CODE", "value": "abc"},
            {"type": "DYNAMIC_QR_CODE", "namespace": "kansio"},
            {"type": "DYNAMIC_QR_CODE", "value": ["abc"], "namespace": "kansio"},
        ],
    )
    def test_malformed(self, client: httpx.Client, merchant: NewPartner, token: Any) -> None:
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert response.status_code == 400
        assert error_codes(response) == ["invalid_token"]


class TestCardToken:
    def test_the_receipt_goes_to_the_card_owner(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        issuer = make_partner(
            services, PartnerRole.CARD_ISSUER, name="Pankki", namespaces=["pankki"]
        )
        enroll_card(services, issuer, "card-77", user_id=user.id)
        token = {"type": "CARD", "id": "card-77", "value": "415301******1234"}
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert statuses(response) == [{"type": "CARD", "status": "delivered"}]
        assert owners(services, response.json()["receipt_id"]) == [user.id]

    def test_a_card_without_a_user_or_unknown_card_is_unmatched(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        issuer = make_partner(
            services, PartnerRole.CARD_ISSUER, name="Pankki", namespaces=["pankki"]
        )
        enroll_card(services, issuer, "card-77")
        body = token_body(
            receipt_doc(),
            {"type": "CARD", "id": "card-77", "value": "415301******1234"},
            {"type": "CARD", "id": "card-unknown", "value": "415301******1234"},
        )
        response = post_receipt(client, merchant, body)
        assert [t["status"] for t in statuses(response)] == ["unmatched", "unmatched"]

    def test_the_issuer_may_then_read_the_receipt(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        issuer = make_partner(
            services, PartnerRole.CARD_ISSUER, name="Pankki", namespaces=["pankki"]
        )
        enroll_card(services, issuer, "card-77", user_id=user.id)
        token = {"type": "CARD", "id": "card-77", "value": "************1234"}
        receipt_id = post_receipt(client, merchant, token_body(receipt_doc(), token)).json()[
            "receipt_id"
        ]
        fetched = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/", headers=auth(issuer.api_key)
        )
        assert fetched.status_code == 200

    def test_pan_must_agree_and_namespace_names_the_issuer(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        first = make_partner(
            services, PartnerRole.CARD_ISSUER, name="Pankki", namespaces=["pankki"]
        )
        second = make_partner(
            services, PartnerRole.CARD_ISSUER, name="Toinen", namespaces=["toinen"]
        )
        enroll_card(services, first, "card-1", user_id=user.id)
        enroll_card(services, second, "card-1", masked_pan="520000******9999")
        body = token_body(
            receipt_doc(),
            {"type": "CARD", "id": "card-1", "value": "415301******1234"},  # ambiguous id
            {"type": "CARD", "id": "card-1", "value": "415301******9999", "namespace": "pankki"},
            {"type": "CARD", "id": "card-1", "value": "415301******1234", "namespace": "pankki"},
        )
        response = post_receipt(client, merchant, body)
        assert [t["status"] for t in statuses(response)] == ["unmatched", "unmatched", "delivered"]

    @pytest.mark.parametrize(
        "token",
        [
            {"type": "CARD", "value": "415301******1234"},
            {"type": "CARD", "id": "card-77"},
            {"type": "CARD", "id": 77, "value": "415301******1234"},
        ],
    )
    def test_malformed(self, client: httpx.Client, merchant: NewPartner, token: Any) -> None:
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert response.status_code == 400
        assert error_codes(response) == ["invalid_token"]


class TestEmailToken:
    def test_a_verified_user_gets_the_receipt_and_an_email(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        token = {"type": "EMAIL", "value": "Maija@Example.COM"}
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert statuses(response) == [{"type": "EMAIL", "status": "delivered"}]
        assert owners(services, response.json()["receipt_id"]) == [user.id]
        [mail] = mail_rows(services)
        assert mail.to_address.lower() == "maija@example.com"
        assert str(mail.receipt_id) == response.json()["receipt_id"]
        # Without a RECEIPT_ID link the e-mail carries the private link (rendered when sent:
        # tests/delivery/test_mail.py reads it in the message).
        assert mail.receipt_link == response.json()["receipt_web_url"]

    def test_an_unverified_or_unknown_address_is_queued_only(
        self, client: httpx.Client, services: Services, merchant: NewPartner
    ) -> None:
        unverified_user(services, "uusi@example.com")
        body = token_body(
            receipt_doc(),
            {"type": "EMAIL", "value": "uusi@example.com"},
            {"type": "EMAIL", "value": "nobody@example.com"},
            {"type": "RECEIPT_ID", "value": "E-1", "namespace": "kauppa"},
        )
        response = post_receipt(client, merchant, body)
        assert [t["status"] for t in statuses(response)] == [
            "email_queued",
            "email_queued",
            "link_created",
        ]
        assert owners(services, response.json()["receipt_id"]) == []
        mails = mail_rows(services)
        assert sorted(m.to_address for m in mails) == ["nobody@example.com", "uusi@example.com"]
        # The RECEIPT_ID link is the one e-mailed when there is one.
        assert {m.receipt_link for m in mails} == {f"{services.settings.link_base}/ns/kauppa/r/E-1"}

    @pytest.mark.parametrize(
        "value", ["not-an-address", "maija@", "@example.com", "a b@example.com", ""]
    )
    def test_invalid_addresses_are_invalid_tokens(
        self, client: httpx.Client, services: Services, merchant: NewPartner, value: str
    ) -> None:
        response = post_receipt(
            client, merchant, token_body(receipt_doc(), {"type": "EMAIL", "value": value})
        )
        assert response.status_code == 400
        assert error_codes(response) == ["invalid_token"]
        assert mail_rows(services) == []


class TestUserToken:
    def test_a_receipt_write_token_delivers_to_its_user(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        connected = connect(services, make_app(services), user, scope="receipt:write")
        token = {"type": "USER", "token": connected.access_token}
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert statuses(response) == [{"type": "USER", "status": "delivered"}]
        assert owners(services, response.json()["receipt_id"]) == [user.id]

    def test_a_read_only_or_revoked_token_is_unmatched(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:

        read_only = connect(services, make_app(services), user, scope="receipt:read")
        other = make_user(services, "toinen@example.com")
        revoked = connect(services, make_app(services, "Toinen", namespaces=["toinen"]), other)
        with services.db.session() as session:
            connection = session.get(Connection, revoked.connection_id)
            assert connection is not None
            connection.revoked_at = services.clock.now()
        body = token_body(
            receipt_doc(),
            {"type": "USER", "token": read_only.access_token},
            {"type": "USER", "token": revoked.access_token},
        )
        response = post_receipt(client, merchant, body)
        assert [t["status"] for t in statuses(response)] == ["unmatched", "unmatched"]

    @pytest.mark.parametrize(
        "token",
        [
            {"type": "USER"},
            {"type": "USER", "token": "garbage"},
            {"type": "USER", "token": "a.b.c"},
        ],
    )
    def test_malformed(self, client: httpx.Client, merchant: NewPartner, token: Any) -> None:
        response = post_receipt(client, merchant, token_body(receipt_doc(), token))
        assert response.status_code == 400
        assert error_codes(response) == ["invalid_token"]


class TestSeveralTokens:
    def test_each_is_reported_in_order_and_one_user_gets_the_receipt_once(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        app = make_app(services, webhook_url="http://127.0.0.1:9/hook")
        connected = connect(services, app, user)
        code = client.post("/api/v1/qr-codes/", headers=connected.app_headers()).json()
        body = token_body(
            receipt_doc(),
            {"type": "RECEIPT_ID", "value": "M-1", "namespace": "kauppa"},
            {"type": "DYNAMIC_QR_CODE", "value": code["value"], "namespace": "kansio"},
            {"type": "USER", "token": connected.access_token},
            {"type": "EMAIL", "value": "maija@example.com"},
            {"type": "EMAIL", "value": "MAIJA@example.com"},
            {"type": "CARD", "id": "nope", "value": "415301******1234"},
        )
        response = post_receipt(client, merchant, body)
        assert statuses(response) == [
            {"type": "RECEIPT_ID", "status": "link_created"},
            {"type": "DYNAMIC_QR_CODE", "status": "delivered"},
            {"type": "USER", "status": "delivered"},
            {"type": "EMAIL", "status": "delivered"},
            {"type": "EMAIL", "status": "delivered"},
            {"type": "CARD", "status": "unmatched"},
        ]
        receipt_id = response.json()["receipt_id"]
        assert owners(services, receipt_id) == [user.id]
        notes = webhooks(services, "receipt_notification")
        assert [orjson.loads(n.payload)["receipt_id"] for n in notes] == [receipt_id]
        assert len(mail_rows(services)) == 1  # one address, one e-mail
        metrics = client.get("/metrics").text
        assert 'kuitti_receipt_tokens_total{status="delivered",type="EMAIL"}' in metrics

    def test_a_failing_request_leaves_no_mail_or_delivery(
        self, client: httpx.Client, services: Services, merchant: NewPartner, user: User
    ) -> None:
        body = token_body(
            receipt_doc(),
            {"type": "EMAIL", "value": "maija@example.com"},
            {"type": "RECEIPT_ID", "value": "X", "namespace": "not-ours"},
        )
        response = post_receipt(client, merchant, body)
        assert response.status_code == 400
        assert mail_rows(services) == []

    def test_unknown_token_type(self, client: httpx.Client, merchant: NewPartner) -> None:
        response = post_receipt(
            client, merchant, token_body(receipt_doc(), {"type": "SMS", "value": "1"})
        )
        assert error_codes(response) == ["invalid_token"]
