"""``/auth``: validation order, errors, state echo, consent content, CSRF, XSS."""

from __future__ import annotations

import base64
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest
from sqlalchemy import func, select

from kuitti.models import AuthorizationCode, Connection
from kuitti.services import Services
from tests.factories import make_user
from tests.oauth.flow import (
    REDIRECT_URI,
    auth_params,
    consent,
    csrf_of,
    log_in,
    make_app,
    pkce_pair,
    state_of,
)


def counts(services: Services) -> tuple[int, int]:
    with services.db.session(write=False) as session:
        return (
            session.scalar(select(func.count()).select_from(Connection)) or 0,
            session.scalar(select(func.count()).select_from(AuthorizationCode)) or 0,
        )


def query_of(response: httpx.Response) -> dict[str, list[str]]:
    assert response.status_code == 303, response.text
    return parse_qs(urlsplit(response.headers["location"]).query, keep_blank_values=True)


class TestClientAndRedirectUri:
    """Never redirect to an address that is not the client's exactly registered one."""

    @pytest.mark.parametrize(
        "redirect_uri",
        [
            REDIRECT_URI + "/extra",
            REDIRECT_URI + "?x=1",
            REDIRECT_URI.replace("https", "http"),
            REDIRECT_URI.upper(),
            "https://evil.example/oauth/callback",
            REDIRECT_URI + "#frag",
        ],
    )
    def test_an_unregistered_redirect_uri_is_an_error_page(
        self, client: httpx.Client, services: Services, redirect_uri: str
    ) -> None:
        app = make_app(services)
        answer = client.get("/auth", params=auth_params(app, redirect_uri=redirect_uri))
        assert answer.status_code == 400
        assert "location" not in answer.headers
        assert "not registered" in answer.text
        assert answer.headers["x-frame-options"] == "DENY"

    def test_an_unknown_client_is_an_error_page(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        params = auth_params(app)
        params["client_id"] = "kc_nobody"
        answer = client.get("/auth", params=params)
        assert answer.status_code == 400
        assert "location" not in answer.headers
        assert "not known" in answer.text

    def test_a_missing_redirect_uri_is_an_error_page(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        params = auth_params(app)
        del params["redirect_uri"]
        answer = client.get("/auth", params=params)
        assert answer.status_code == 400
        assert "location" not in answer.headers


class TestRedirectedErrors:
    @pytest.mark.parametrize(
        ("change", "error"),
        [
            ({"response_type": "token"}, "unsupported_response_type"),
            ({"scope": "receipt:delete"}, "invalid_scope"),
            ({"scope": ""}, "invalid_scope"),
            ({"code_challenge": "short", "code_challenge_method": "S256"}, "invalid_request"),
            ({"code_challenge": "a" * 43, "code_challenge_method": "plain"}, "invalid_request"),
        ],
    )
    def test_errors_go_back_with_the_state(
        self, client: httpx.Client, services: Services, change: dict[str, str], error: str
    ) -> None:
        app = make_app(services)
        params = {**auth_params(app, state="st ate/+=ä"), **change}
        query = query_of(client.get("/auth", params=params))
        assert query["error"] == [error]
        assert query["state"] == ["st ate/+=ä"]

    def test_a_public_client_must_use_pkce(self, client: httpx.Client, services: Services) -> None:
        app = make_app(services, public_client=True)
        query = query_of(client.get("/auth", params=auth_params(app)))
        assert query["error"] == ["invalid_request"]

    def test_a_repeated_parameter_is_invalid(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        url = httpx.URL("/auth", params=auth_params(app))
        answer = client.get(str(url) + "&scope=receipt:write")
        assert query_of(answer)["error"] == ["invalid_request"]


class TestLoginThenConsent:
    def test_login_form_comes_back_to_the_consent_page(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        params = auth_params(app, state=state_of("Hei"))
        page = client.get("/auth", params=params)
        assert page.status_code == 200
        assert 'name="action" value="login"' in page.text
        assert 'name="action" value="signup"' in page.text
        next_path = str(httpx.URL("/auth", params=params))
        answer = client.post(
            "/login",
            data={
                "email": "maija@example.com",
                "password": "correct horse 1",
                "action": "login",
                "next": next_path,
                "csrf_token": csrf_of(page),
            },
        )
        assert answer.headers["location"] == next_path
        consent_page = client.get(answer.headers["location"])
        assert 'name="decision" value="approve"' in consent_page.text

    def test_consent_names_partner_scopes_and_message_escaped(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, name='<img src=x onerror="alert(1)">Pankki')
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        state = state_of("<script>alert('x')</script> Yhdistä tili", customer="1")
        page = client.get("/auth", params=auth_params(app, "receipt:read receipt:write", state))
        assert page.status_code == 200
        assert "<script>alert" not in page.text
        assert "&lt;script&gt;alert(" in page.text
        assert "<img src=x" not in page.text
        assert "&lt;img src=x" in page.text
        assert "read the receipts you receive" in page.text
        assert "send receipts to your kuitti account" in page.text
        assert "Yhdistä tili" in page.text
        assert page.headers["x-frame-options"] == "DENY"
        assert "frame-ancestors 'none'" in page.headers["content-security-policy"]

    def test_approve_echoes_the_state_byte_for_byte(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        for state in ["not base64 & not json ?=#ä", state_of("x", k="v") + "=="]:
            query = query_of(consent(client, auth_params(app, state=state)))
            assert query["state"] == [state]
            assert len(query["code"][0]) >= 43

    def test_a_non_json_state_carries_no_metadata(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        not_json = base64.b64encode(b"[1, 2]").decode()
        consent(client, auth_params(app, state=not_json))
        with services.db.session(write=False) as session:
            connection = session.scalar(select(Connection))
            assert connection is not None
            assert connection.partner_metadata is None

    def test_metadata_from_the_state_is_stored(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        state = base64.urlsafe_b64encode(
            orjson.dumps({"partner_metadata": {"customer": "ä-1"}})
        ).decode()
        consent(client, auth_params(app, state=state.rstrip("=")))
        with services.db.session(write=False) as session:
            connection = session.scalar(select(Connection))
            assert connection is not None
            assert connection.partner_metadata == {"customer": "ä-1"}

    def test_deny_sends_access_denied_and_connects_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        query = query_of(consent(client, auth_params(app, state="s1"), decision="deny"))
        assert query == {"error": ["access_denied"], "state": ["s1"]}
        assert counts(services) == (0, 0)

    def test_consent_without_csrf_token_changes_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        answer = client.post("/auth", data={**auth_params(app), "decision": "approve"})
        assert answer.status_code == 403
        forged = client.post(
            "/auth", data={**auth_params(app), "decision": "approve", "csrf_token": "x" * 43}
        )
        assert forged.status_code == 403
        assert counts(services) == (0, 0)

    def test_consent_post_with_a_tampered_redirect_is_refused(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        page = client.get("/auth", params=auth_params(app))
        form = {
            **auth_params(app, redirect_uri="https://evil.example/cb"),
            "decision": "approve",
            "csrf_token": csrf_of(page),
        }
        answer = client.post("/auth", data=form)
        assert answer.status_code == 400
        assert "location" not in answer.headers
        assert counts(services) == (0, 0)

    def test_pkce_challenge_is_kept_with_the_code(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services, public_client=True)
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        _verifier, challenge = pkce_pair()
        params = auth_params(app, code_challenge=challenge, code_challenge_method="S256")
        assert "code" in query_of(consent(client, params))
        with services.db.session(write=False) as session:
            code = session.scalar(select(AuthorizationCode))
            assert code is not None
            assert code.code_challenge == challenge
