"""The whole flow through real third-party clients: Authlib's OAuth 2.0 client against the live
server, tokens checked by PyJWT through the JWKS URL; then user-authorized reading."""

from __future__ import annotations

import uuid
import warnings
from urllib.parse import parse_qs, urlsplit

import httpx
import jwt
import pytest
from authlib.deprecate import AuthlibDeprecationWarning
from authlib.integrations.httpx_client import OAuth2Client
from sqlalchemy import func, select

from kuitti.models import Connection, WebhookDelivery
from kuitti.oauth.tokens import verify_access_token
from kuitti.services import Services
from tests.conftest import LiveServer
from tests.factories import make_user
from tests.oauth.flow import (
    REDIRECT_URI,
    connect,
    consent,
    delivered_receipt,
    log_in,
    make_app,
    state_of,
)

with warnings.catch_warnings():
    # Authlib 1.9 prefers the httpx2 package and warns when it falls back to httpx.
    # Imported above first: importing authlib.deprecate installs an "always" filter of its own.
    warnings.filterwarnings("ignore", "The httpx module", AuthlibDeprecationWarning)


def browser_approves(client: httpx.Client, url: str) -> str:
    """What the user's browser does with the authorization URL: the callback URL."""
    query = {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
    answer = consent(client, query)
    assert answer.status_code == 303, answer.text
    location: str = answer.headers["location"]
    assert location.startswith(REDIRECT_URI + "?")
    return location


class TestAuthlibClient:
    @pytest.mark.parametrize("method", ["client_secret_basic", "client_secret_post"])
    def test_code_flow_and_jwks_verification(
        self, client: httpx.Client, live_server: LiveServer, services: Services, method: str
    ) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        state = state_of("Yhdistä kuitit", customer="c-42")
        with OAuth2Client(
            app.partner.client_id,
            app.client_secret,
            scope="receipt:read receipt:write",
            redirect_uri=REDIRECT_URI,
            token_endpoint_auth_method=method,
        ) as oauth:
            url, sent_state = oauth.create_authorization_url(f"{live_server.url}/auth", state=state)
            assert sent_state == state
            callback = browser_approves(client, url)
            token = oauth.fetch_token(
                f"{live_server.url}/api/oauth/token", authorization_response=callback, state=state
            )
        assert token["token_type"] == "Bearer"
        assert token["scope"] == "receipt:read receipt:write"
        access_token = token["access_token"]

        jwks = jwt.PyJWKClient(f"{live_server.url}/.well-known/jwks.json")
        signing_key = jwks.get_signing_key_from_jwt(access_token)
        claims = jwt.decode(
            access_token,
            signing_key.key,
            algorithms=["ES256"],
            audience=app.partner.client_id,
            issuer=services.settings.issuer,
            options={"verify_exp": False, "verify_iat": False},
        )
        assert set(claims) >= {"iss", "aud", "service_id", "scope", "iat", "jti", "exp"}
        assert claims["scope"] == "receipt:read receipt:write"
        with services.db.session(write=False) as session:
            connection = session.get(Connection, uuid.UUID(claims["service_id"]))
            assert connection is not None
            assert connection.user_id == user.id
            assert connection.partner_metadata == {"customer": "c-42"}

    def test_public_client_with_pkce(
        self, client: httpx.Client, live_server: LiveServer, services: Services
    ) -> None:
        app = make_app(services, public_client=True)
        assert app.client_secret is None
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        with OAuth2Client(
            app.partner.client_id,
            scope="receipt:read",
            redirect_uri=REDIRECT_URI,
            token_endpoint_auth_method="none",
            code_challenge_method="S256",
        ) as oauth:
            verifier = "v" * 64
            url, state = oauth.create_authorization_url(
                f"{live_server.url}/auth", code_verifier=verifier
            )
            assert "code_challenge=" in url
            callback = browser_approves(client, url)
            token = oauth.fetch_token(
                f"{live_server.url}/api/oauth/token",
                authorization_response=callback,
                code_verifier=verifier,
                state=state,
            )
        assert token["scope"] == "receipt:read"


class TestEndpointsAsDocumented:
    def test_json_body_and_metadata(
        self, client: httpx.Client, live_server: LiveServer, services: Services
    ) -> None:
        meta = client.get("/.well-known/oauth-authorization-server").json()
        assert meta["issuer"] == services.settings.issuer == live_server.url
        assert meta["token_endpoint"] == f"{live_server.url}/api/oauth/token"
        assert meta["authorization_endpoint"] == f"{live_server.url}/auth"
        assert meta["code_challenge_methods_supported"] == ["S256"]
        # No JWT client authentication, so no algorithms for it (RFC 8414 §2).
        assert "token_endpoint_auth_signing_alg_values_supported" not in meta
        paths = client.get("/openapi.json").json()["paths"]
        assert {"/api/oauth/token", "/api/oauth/revoke", "/auth", "/membership"} <= set(paths)
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        params = {
            "response_type": "code",
            "client_id": app.partner.client_id or "",
            "redirect_uri": REDIRECT_URI,
            "scope": "receipt:read",
            "state": "s",
        }
        location = consent(client, params).headers["location"]
        code = parse_qs(urlsplit(location).query)["code"][0]
        answer = client.post(
            "/api/oauth/token/",
            json={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": app.partner.client_id,
                "client_secret": app.client_secret,
                "redirect_uri": REDIRECT_URI,
            },
        )
        assert answer.status_code == 200, answer.text
        assert answer.headers["cache-control"] == "no-store"
        body = answer.json()
        assert body["token_type"] == "Bearer"
        assert body["scope"] == "receipt:read"
        assert body["access_token"].count(".") == 2
        metrics = client.get("/metrics").text
        assert 'kuitti_oauth_token_requests_total{result="issued"}' in metrics
        assert 'kuitti_oauth_consent_decisions_total{decision="approve"}' in metrics
        assert 'kuitti_logins_total{result="ok"}' in metrics

    def test_reapproving_keeps_the_service_id_and_updates_scope(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        first = connect(client, app, "maija@example.com", scope="receipt:read")
        second = connect(client, app, "maija@example.com", scope="receipt:write")
        with services.db.session(write=False) as session:
            a = verify_access_token(session, services.settings, first, now=services.clock.now())
            b = verify_access_token(session, services.settings, second, now=services.clock.now())
            assert a.id == b.id
            assert b.scope == "receipt:write"
            assert session.scalar(select(func.count()).select_from(Connection)) == 1


class TestUserAuthorizedReading:
    def test_reads_and_lists_the_users_receipts(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, user.id)
        for header in ("SERVICE_APIKEY", "Service-Apikey"):
            headers = {header: app.api_key, "Authorization": f"Bearer {token}"}
            one = client.get(f"/api/v1/receipts/{receipt_id}/service_json/", headers=headers)
            assert one.status_code == 200, one.text
            assert one.json()["merchant"]["name"] == "Kauppa Oy"
            listing = client.get("/api/v1/receipts/", headers=headers)
            assert [r["receipt_id"] for r in listing.json()["receipts"]] == [receipt_id]

    def test_another_users_receipt_is_404(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        other = make_user(services, "matti@example.com")
        token = connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, other.id)
        headers = {"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {token}"}
        answer = client.get(f"/api/v1/receipts/{receipt_id}/service_json/", headers=headers)
        assert answer.status_code == 404

    def test_another_partners_key_is_401(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services)
        other = make_app(services, name="Toinen")
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, user.id)
        headers = {"SERVICE_APIKEY": other.api_key, "Authorization": f"Bearer {token}"}
        answer = client.get(f"/api/v1/receipts/{receipt_id}/service_json/", headers=headers)
        assert answer.status_code == 401
        assert answer.json()["error"] == "unauthorized"

    def test_a_write_only_token_is_403_insufficient_scope(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com", scope="receipt:write")
        receipt_id = delivered_receipt(client, services, user.id)
        headers = {"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {token}"}
        answer = client.get(f"/api/v1/receipts/{receipt_id}/service_json/", headers=headers)
        assert answer.status_code == 403
        assert answer.json()["error"] == "insufficient_scope"
        assert "decription" in answer.json()


class TestRevoke:
    def test_revoke_then_404_and_no_webhook(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services, webhook_url="http://127.0.0.1:9/hook")
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        receipt_id = delivered_receipt(client, services, user.id)
        bearer = {"Authorization": f"Bearer {token}"}
        with services.db.session(write=False) as session:
            service_id = str(verify_access_token(session, services.settings, token).id)
            queued = session.scalar(select(func.count()).select_from(WebhookDelivery))
        answer = client.delete("/api/oauth/revoke", headers=bearer)
        assert answer.status_code == 200
        assert answer.json() == {"service_id": service_id, "revoked": True}
        again = client.delete("/api/oauth/revoke/", headers=bearer)
        assert again.status_code == 404
        assert again.json()["error"] == "not_found"
        reading = client.get(
            f"/api/v1/receipts/{receipt_id}/service_json/",
            headers={**bearer, "SERVICE_APIKEY": app.api_key},
        )
        assert reading.status_code == 401
        with services.db.session(write=False) as session:
            # Only the receipt_notification from before; the partner's own revoke sends nothing.
            assert session.scalar(select(func.count()).select_from(WebhookDelivery)) == queued
            types = session.scalars(select(WebhookDelivery.notification_type)).all()
            assert "oauth_authorization_revoke" not in types

    def test_unknown_token_is_404(self, client: httpx.Client, services: Services) -> None:
        answer = client.delete("/api/oauth/revoke", headers={"Authorization": "Bearer abc.def.ghi"})
        assert answer.status_code == 404
        assert answer.json()["error"] == "not_found"
