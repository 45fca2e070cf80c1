"""Every form of the account pages refuses a POST without the CSRF token, and changes nothing.
(Login, consent, membership, connection removal and the reset request are covered beside their
features.)"""

from __future__ import annotations

import httpx
from sqlalchemy import func, select

from kuitti.models import MailMessage, User, UserSession, UserToken
from kuitti.services import Services
from kuitti.users import service as users
from tests.factories import make_user
from tests.oauth.flow import log_in


def count(services: Services, model: type) -> int:
    with services.db.session(write=False) as session:
        return session.scalar(select(func.count()).select_from(model)) or 0


class TestCsrfEverywhere:
    def test_signup_without_token_creates_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        client.get("/signup")
        answer = client.post(
            "/signup",
            data={"email": "new@example.com", "password": "long enough 1", "action": "signup"},
        )
        assert answer.status_code == 403
        assert count(services, User) == 0
        assert count(services, MailMessage) == 0

    def test_logout_without_token_keeps_the_session(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        assert client.post("/logout").status_code == 403
        assert count(services, UserSession) == 1
        assert client.get("/account").status_code == 200

    def test_account_deletion_without_token_deletes_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        log_in(client, "maija@example.com")
        answer = client.post("/account/delete", data={"password": "correct horse 1"})
        assert answer.status_code == 403
        with services.db.session(write=False) as session:
            user = session.scalar(select(User))
            assert user is not None
            assert user.deleted_at is None

    def test_resending_verification_without_token_sends_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        with services.db.session() as session:
            users.create_user(
                session,
                "new@example.com",
                "long enough 1",
                now=services.clock.now(),
                verified=False,
            )
        log_in(client, "new@example.com", "long enough 1")
        assert client.post("/verify-email").status_code == 403
        assert count(services, MailMessage) == 0

    def test_new_password_without_token_changes_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        user = make_user(services, "maija@example.com")
        with services.db.session() as session:
            fresh = session.get(User, user.id)
            assert fresh is not None
            token = users.issue_user_token(
                session, fresh, users.TokenPurpose.RESET_PASSWORD, now=services.clock.now()
            )
        client.get(f"/password-reset/{token}")
        answer = client.post(f"/password-reset/{token}", data={"password": "attacker chose"})
        assert answer.status_code == 403
        with services.db.session(write=False) as session:
            row = session.scalar(select(UserToken))
            assert row is not None
            assert row.used_at is None
        assert log_in(client, "maija@example.com").status_code == 303
