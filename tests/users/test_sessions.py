"""Login, sign-up, logout, ``next`` handling and e-mail verification through the live server."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import httpx
import pytest
from sqlalchemy import func, select

from kuitti.delivery.mail import send_due_mail
from kuitti.models import User, UserSession
from kuitti.services import Services
from kuitti.users.sessions import safe_next
from kuitti.web import SESSION_COOKIE
from tests.conftest import LiveServer, free_port, make_settings
from tests.factories import make_user
from tests.oauth.flow import csrf_of, log_in
from tests.users.conftest import Inbox


def signup(
    client: httpx.Client, email: str, password: str, next: str = "/account"
) -> httpx.Response:
    page = client.get("/signup", params={"next": next})
    return client.post(
        "/signup",
        data={
            "email": email,
            "password": password,
            "action": "signup",
            "next": next,
            "csrf_token": csrf_of(page),
        },
    )


class TestSafeNext:
    @pytest.mark.parametrize(
        "value",
        [
            "//evil.example/x",
            "/\\evil.example",
            "\\\\evil.example",
            "https://evil.example/",
            "javascript:alert(1)",
            "evil.example",
            "/ok\r\nSet-Cookie: x=1",
            "/a\\b",
            "",
        ],
    )
    def test_refuses_anything_but_a_local_path(self, value: str) -> None:
        assert safe_next(value) == "/account"

    def test_keeps_a_local_path_with_query(self) -> None:
        assert safe_next("/ns/kauppa/r/123?x=1") == "/ns/kauppa/r/123?x=1"


class TestLogin:
    def test_logs_in_and_returns_to_next(self, client: httpx.Client, services: Services) -> None:
        make_user(services, "maija@example.com")
        answer = log_in(client, "maija@example.com", next="/ns/kauppa/r/R-1")
        assert answer.status_code == 303
        assert answer.headers["location"] == "/ns/kauppa/r/R-1"
        cookie = answer.headers["set-cookie"]
        assert f"{SESSION_COOKIE}=" in cookie
        assert "HttpOnly" in cookie
        assert "samesite=lax" in cookie.lower()
        assert "Secure" not in cookie  # the test server is plain http
        assert client.get("/login").headers["location"] == "/account"

    def test_an_open_redirect_in_next_goes_home(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        answer = log_in(client, "maija@example.com", next="//evil.example/")
        assert answer.headers["location"] == "/account"

    def test_a_wrong_password_is_refused(self, client: httpx.Client, services: Services) -> None:
        make_user(services, "maija@example.com")
        answer = log_in(client, "maija@example.com", password="wrong password")
        assert answer.status_code == 400
        assert "wrong" in answer.text
        assert SESSION_COOKIE not in client.cookies

    def test_without_the_csrf_token_nothing_happens(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        client.get("/login")
        answer = client.post(
            "/login",
            data={"email": "maija@example.com", "password": "correct horse 1", "action": "login"},
        )
        assert answer.status_code == 403
        with services.db.session(write=False) as session:
            assert session.scalar(select(func.count()).select_from(UserSession)) == 0

    def test_brute_force_is_throttled_even_with_the_right_password(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        for _ in range(5):
            assert log_in(client, "maija@example.com", password="guess guess").status_code == 400
        blocked = log_in(client, "maija@example.com")
        assert blocked.status_code == 429
        assert SESSION_COOKIE not in client.cookies
        services.clock.advance(15 * 60 + 1)  # type: ignore[attr-defined]
        assert log_in(client, "maija@example.com").status_code == 303

    def test_logout_ends_the_session(self, client: httpx.Client, services: Services) -> None:
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        page = client.get("/login", params={"next": "/account"})
        token = csrf_of(page) if page.status_code == 200 else client.cookies["kuitti_csrf"]
        old = client.cookies[SESSION_COOKIE]
        answer = client.post("/logout", data={"csrf_token": token})
        assert answer.status_code == 303
        with services.db.session(write=False) as session:
            assert session.scalar(select(func.count()).select_from(UserSession)) == 0
        client.cookies.set(SESSION_COOKIE, old)
        assert client.get("/login").status_code == 200  # the old cookie is worth nothing


class TestSignup:
    def test_signs_up_mails_a_link_that_verifies(
        self,
        client: httpx.Client,
        services: Services,
        mail_services: Services,
        inbox: Inbox,
    ) -> None:
        answer = signup(client, "Uusi@Example.com", "a good password", next="/account")
        assert answer.status_code == 303
        assert SESSION_COOKIE in client.cookies
        with services.db.session(write=False) as session:
            user = session.scalar(select(User).where(User.email == "uusi@example.com"))
            assert user is not None
            assert user.email_verified_at is None
        assert send_due_mail(mail_services) == 1
        assert inbox.arrived.wait(5)
        assert inbox.messages[0]["To"] == "uusi@example.com"
        link = re.search(r"https?://\S+/verify-email/\S+", inbox.text_of())
        assert link is not None
        path = httpx.URL(link.group(0)).raw_path.decode()
        assert client.get(path).status_code == 200
        with services.db.session(write=False) as session:
            user = session.scalar(select(User).where(User.email == "uusi@example.com"))
            assert user is not None
            assert user.email_verified_at == services.clock.now()
        assert client.get(path).status_code == 400  # single use

    def test_a_taken_address_or_short_password_creates_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        assert signup(client, "maija@example.com", "another password").status_code == 400
        assert signup(client, "new@example.com", "short").status_code == 400
        with services.db.session(write=False) as session:
            assert session.scalar(select(func.count()).select_from(User)) == 1


class TestSecureCookies:
    def test_cookies_are_secure_when_the_pages_are_https(
        self, services: Services, tmp_path: Path
    ) -> None:
        settings = make_settings(
            services.settings.database_url or "",
            tmp_path,
            services.settings.public_url,
            auth_url="https://kuitti.example",
        )
        https_services = dataclasses.replace(services, settings=settings)
        make_user(services, "maija@example.com")
        with (
            LiveServer(https_services, free_port()) as server,
            httpx.Client(base_url=server.url) as http,
        ):
            page = http.get("/login")
            assert "Secure" in page.headers["set-cookie"]  # the CSRF cookie
            # httpx keeps Secure cookies away from http://; hand the CSRF and pre-session
            # cookies over.
            http.cookies.set("kuitti_csrf", csrf_of(page))
            http.cookies.set("kuitti_presession", page.cookies["kuitti_presession"])
            answer = http.post(
                "/login",
                data={
                    "email": "maija@example.com",
                    "password": "correct horse 1",
                    "action": "login",
                    "next": "/account",
                    "csrf_token": csrf_of(page),
                },
            )
            assert answer.status_code == 303
            # The session cookie, and a CSRF token bound to the new session.
            cookies = [v for k, v in answer.headers.multi_items() if k == "set-cookie"]
            assert {c.split("=")[0] for c in cookies} == {SESSION_COOKIE, "kuitti_csrf"}
            for cookie in cookies:
                assert "Secure" in cookie
                assert "HttpOnly" in cookie


class TestSessionLifetime:
    def test_a_session_ends_after_14_days(self, client: httpx.Client, services: Services) -> None:
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        services.clock.advance(14 * 24 * 3600 - 60)  # type: ignore[attr-defined]
        assert client.get("/account").status_code == 200
        services.clock.advance(120)  # type: ignore[attr-defined]
        assert client.get("/account").status_code == 303
