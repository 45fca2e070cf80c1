"""``/api/oauth/token`` and the access tokens: every attack gets its RFC answer and changes
nothing."""

from __future__ import annotations

import base64
import json
from concurrent.futures import ThreadPoolExecutor
from threading import Barrier

import httpx
import pytest
from joserfc import jwt as jose_jwt
from joserfc.jwk import ECKey
from sqlalchemy import func, select, text

from kuitti.clock import FrozenClock
from kuitti.models import IssuedToken, SigningKey, User
from kuitti.oauth import keys
from kuitti.oauth.tokens import ACCESS_TOKEN_TTL_SECONDS
from kuitti.partners.service import NewPartner
from kuitti.security import SecretBox
from kuitti.services import Services
from tests.factories import make_user
from tests.oauth.flow import (
    REDIRECT_URI,
    auth_params,
    code_from,
    consent,
    exchange,
    log_in,
    make_app,
    pkce_pair,
)


def fresh_code(client: httpx.Client, services: Services, app: NewPartner, **extra: str) -> str:
    if not _has_user(services):
        make_user(services, "maija@example.com")
    log_in(client, "maija@example.com")
    code, _ = code_from(consent(client, auth_params(app, **extra)))
    return code


def _has_user(services: Services) -> bool:

    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(User)) != 0


def tokens_issued(services: Services) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(IssuedToken)) or 0


def can_read(client: httpx.Client, api_key: str, token: str) -> int:
    answer = client.get(
        "/api/v1/receipts/", headers={"SERVICE_APIKEY": api_key, "Authorization": f"Bearer {token}"}
    )
    return answer.status_code


def assert_oauth_error(answer: httpx.Response, error: str, status: int = 400) -> None:
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error
    assert answer.headers["cache-control"] == "no-store"


class TestCodeRules:
    def test_a_replayed_code_fails_and_revokes_what_it_issued(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        first = exchange(client, app, code)
        token = first.json()["access_token"]
        assert can_read(client, app.api_key, token) == 200
        assert_oauth_error(exchange(client, app, code), "invalid_grant")
        assert can_read(client, app.api_key, token) == 401
        assert tokens_issued(services) == 1

    def test_a_code_expires_after_60_seconds(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        clock.advance(61)
        assert_oauth_error(exchange(client, app, code), "invalid_grant")
        assert tokens_issued(services) == 0

    def test_a_code_works_at_59_seconds(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        clock.advance(59)
        assert exchange(client, app, code).status_code == 200

    def test_another_clients_code_is_refused_and_stays_usable(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        thief = make_app(services, name="Varas")
        code = fresh_code(client, services, app)
        assert_oauth_error(exchange(client, thief, code), "invalid_grant")
        assert tokens_issued(services) == 0
        assert exchange(client, app, code).status_code == 200

    def test_a_different_redirect_uri_is_refused(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, redirect_uris=[REDIRECT_URI, "https://bank.example/other"])
        code = fresh_code(client, services, app)
        answer = exchange(client, app, code, redirect_uri="https://bank.example/other")
        assert_oauth_error(answer, "invalid_grant")
        assert exchange(client, app, code).status_code == 200

    def test_an_unknown_code_is_invalid_grant(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        assert_oauth_error(exchange(client, app, "made-up"), "invalid_grant")


class TestClientAuthentication:
    def test_a_wrong_secret_is_invalid_client_401(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        answer = exchange(client, app, code, client_secret="kcs_wrong")
        assert_oauth_error(answer, "invalid_client", 401)
        assert "www-authenticate" in answer.headers
        assert tokens_issued(services) == 0
        assert exchange(client, app, code).status_code == 200

    def test_http_basic_works_and_a_wrong_basic_secret_does_not(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        body = {"grant_type": "authorization_code", "code": code, "redirect_uri": REDIRECT_URI}
        wrong = client.post(
            "/api/oauth/token", data=body, auth=(app.partner.client_id or "", "nope")
        )
        assert_oauth_error(wrong, "invalid_client", 401)
        right = client.post(
            "/api/oauth/token",
            data=body,
            auth=(app.partner.client_id or "", app.client_secret or ""),
        )
        assert right.status_code == 200, right.text

    def test_two_authentication_methods_are_refused(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        body = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": REDIRECT_URI,
            "client_secret": app.client_secret,
        }
        answer = client.post(
            "/api/oauth/token",
            data=body,
            auth=(app.partner.client_id or "", app.client_secret or ""),
        )
        assert_oauth_error(answer, "invalid_request")

    def test_unsupported_grant_type_and_bad_bodies(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        answer = client.post(
            "/api/oauth/token", data={"grant_type": "password", "client_id": app.partner.client_id}
        )
        assert_oauth_error(answer, "unsupported_grant_type")
        assert_oauth_error(
            client.post(
                "/api/oauth/token", content=b"{", headers={"Content-Type": "application/json"}
            ),
            "invalid_request",
        )
        assert_oauth_error(
            client.post("/api/oauth/token", content=b"x", headers={"Content-Type": "text/plain"}),
            "invalid_request",
        )
        assert_oauth_error(client.post("/api/oauth/token", json=[1]), "invalid_request")

    @pytest.mark.parametrize(
        ("content", "headers", "error", "status"),
        [
            (b"{not json", {"Content-Type": "application/json"}, "invalid_request", 400),
            (b"grant_type=password", {}, "unsupported_grant_type", 400),
            (b"code=abc", {}, "invalid_request", 400),
            (
                b"grant_type=authorization_code",
                {"Authorization": "Basic !!"},
                "invalid_client",
                401,
            ),
        ],
    )
    def test_a_malformed_request_is_answered_while_another_transaction_holds_the_write_lock(
        self,
        client: httpx.Client,
        services: Services,
        content: bytes,
        headers: dict[str, str],
        error: str,
        status: int,
    ) -> None:
        form = {"Content-Type": "application/x-www-form-urlencoded", **headers}
        with services.db.session() as held:  # SQLite: BEGIN IMMEDIATE, the one writer
            held.execute(text("UPDATE partners SET name = name"))
            answer = client.post("/api/oauth/token", content=content, headers=form, timeout=10)
        assert_oauth_error(answer, error, status)


class TestPkce:
    def test_a_wrong_verifier_is_refused_and_the_right_one_works(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, public_client=True)
        verifier, challenge = pkce_pair()
        code = fresh_code(
            client, services, app, code_challenge=challenge, code_challenge_method="S256"
        )
        other_verifier, _ = pkce_pair()
        assert_oauth_error(
            exchange(client, app, code, code_verifier=other_verifier), "invalid_grant"
        )
        assert_oauth_error(exchange(client, app, code), "invalid_grant")
        assert exchange(client, app, code, code_verifier=verifier).status_code == 200

    def test_a_public_client_cannot_send_a_secret(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, public_client=True)
        verifier, challenge = pkce_pair()
        code = fresh_code(
            client, services, app, code_challenge=challenge, code_challenge_method="S256"
        )
        answer = exchange(client, app, code, code_verifier=verifier, client_secret="guess")
        assert_oauth_error(answer, "invalid_client", 401)

    def test_a_verifier_without_a_challenge_is_refused(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        verifier, _ = pkce_pair()
        assert_oauth_error(exchange(client, app, code, code_verifier=verifier), "invalid_grant")


def _b64(data: dict[str, object]) -> str:
    return base64.urlsafe_b64encode(json.dumps(data).encode()).rstrip(b"=").decode()


def _parts(token: str) -> tuple[dict[str, object], dict[str, object], str]:
    header, payload, signature = token.split(".")

    def pad(part: str) -> str:
        return part + "=" * (-len(part) % 4)

    return (
        json.loads(base64.urlsafe_b64decode(pad(header))),
        json.loads(base64.urlsafe_b64decode(pad(payload))),
        signature,
    )


class TestTokenForgery:
    @pytest.fixture
    def issued(self, client: httpx.Client, services: Services) -> tuple[NewPartner, str]:
        app = make_app(services)
        code = fresh_code(client, services, app, scope="receipt:write")
        token: str = exchange(client, app, code).json()["access_token"]
        return app, token

    def test_a_tampered_payload_fails(
        self, client: httpx.Client, issued: tuple[NewPartner, str]
    ) -> None:
        app, token = issued
        header, payload, signature = _parts(token)
        payload["scope"] = "receipt:read receipt:write"
        forged = f"{_b64(header)}.{_b64(payload)}.{signature}"
        assert can_read(client, app.api_key, forged) == 401

    def test_alg_none_fails(self, client: httpx.Client, issued: tuple[NewPartner, str]) -> None:
        app, token = issued
        header, payload, _ = _parts(token)
        payload["scope"] = "receipt:read"
        for alg in ("none", "None", "HS256"):
            forged = f"{_b64({**header, 'alg': alg})}.{_b64(payload)}."
            answer = client.get(
                "/api/v1/receipts/",
                headers={"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {forged}"},
            )
            assert answer.status_code == 401
            assert answer.headers["www-authenticate"].startswith("Bearer")

    def test_a_foreign_key_with_our_kid_fails(
        self, client: httpx.Client, issued: tuple[NewPartner, str]
    ) -> None:
        app, token = issued
        header, payload, _ = _parts(token)
        payload["scope"] = "receipt:read"
        foreign = ECKey.generate_key("P-256")
        forged = jose_jwt.encode(dict(header), dict(payload), foreign)
        assert can_read(client, app.api_key, forged) == 401

    def test_an_expired_token_fails(
        self, client: httpx.Client, clock: FrozenClock, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        token = exchange(client, app, code).json()["access_token"]
        clock.advance(ACCESS_TOKEN_TTL_SECONDS - 120)
        assert can_read(client, app.api_key, token) == 200
        clock.advance(240)
        assert can_read(client, app.api_key, token) == 401

    def test_a_token_of_another_issuer_fails(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        code = fresh_code(client, services, app)
        token = exchange(client, app, code).json()["access_token"]
        header, payload, _ = _parts(token)
        payload["iss"] = "https://evil.example"
        with services.db.session() as session:
            kid, key = keys.current_key(
                session, SecretBox(services.settings.resolved_secret_key), now=services.clock.now()
            )
        # Even signed with our own key, a wrong issuer is refused.
        forged = jose_jwt.encode({**header, "kid": kid}, dict(payload), key)
        assert can_read(client, app.api_key, forged) == 401


class TestKeyRotation:
    def test_old_tokens_verify_after_rotation_and_new_ones_use_the_new_key(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        app = make_app(services)
        old = exchange(client, app, fresh_code(client, services, app)).json()["access_token"]
        clock.advance(1)
        with services.db.session() as session:
            new_kid = keys.create_key(
                session, SecretBox(services.settings.resolved_secret_key), now=clock.now()
            ).kid
        new = exchange(client, app, fresh_code(client, services, app)).json()["access_token"]
        assert _parts(new)[0]["kid"] == new_kid
        assert _parts(old)[0]["kid"] != new_kid
        assert can_read(client, app.api_key, old) == 200
        assert can_read(client, app.api_key, new) == 200
        kids = {k["kid"] for k in client.get("/.well-known/jwks.json").json()["keys"]}
        assert kids == {new_kid, _parts(old)[0]["kid"]}
        with services.db.session(write=False) as session:
            assert session.scalar(select(func.count()).select_from(SigningKey)) == 2


class TestConcurrentExchange:
    def test_two_simultaneous_exchanges_issue_one_token(
        self, client: httpx.Client, services: Services
    ) -> None:

        app = make_app(services)
        code = fresh_code(client, services, app)
        barrier = Barrier(2)

        def attempt(_: int) -> int:
            with httpx.Client(base_url=client.base_url) as own:
                barrier.wait(5)
                return exchange(own, app, code).status_code

        with ThreadPoolExecutor(2) as pool:
            statuses = sorted(pool.map(attempt, range(2)))
        assert statuses == [200, 400]
        assert tokens_issued(services) == 1
