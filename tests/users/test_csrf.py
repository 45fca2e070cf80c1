"""Every form of the account pages refuses a POST without the CSRF token, and changes nothing.
(Login, consent, membership, connection removal and the reset request are covered beside their
features.)"""

from __future__ import annotations

import httpx
import pytest
from sqlalchemy import func, select

from kuitti.models import MailMessage, User, UserSession, UserToken
from kuitti.services import Services
from kuitti.users import service as users
from tests.conftest import LiveServer
from tests.factories import make_user
from tests.oauth.flow import csrf_of, log_in


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


SELF_CHOSEN = ["abc", "a" * 43, "x.y"]

# Every form kind: (path, needs a logged-in user, other fields).
FORMS = [
    ("/login", False, {"email": "maija@example.com", "password": "correct horse 1"}),
    ("/signup", False, {"email": "new@example.com", "password": "long enough 1"}),
    ("/password-reset", False, {"email": "maija@example.com"}),
    ("/password-reset/sometoken", False, {"password": "attacker chose"}),
    ("/r/sometoken", False, {"action": "import"}),
    ("/ns/kauppa/r/1234", False, {"action": "import"}),
    ("/logout", True, {}),
    ("/verify-email", True, {}),
    ("/account/delete", True, {"password": "correct horse 1"}),
    ("/account/connections/0b5e1f2a-0000-4000-8000-000000000000/remove", True, {}),
    ("/auth", True, {"decision": "approve"}),
    ("/membership", True, {"action": "remove"}),
]


class TestTokensAreBound:
    """A cookie and field that the client chose itself are refused on every form, and so is a
    genuine token issued to another session."""

    @pytest.mark.parametrize(("path", "logged_in", "fields"), FORMS)
    @pytest.mark.parametrize("chosen", SELF_CHOSEN)
    def test_a_self_chosen_pair_is_refused(
        self,
        client: httpx.Client,
        services: Services,
        path: str,
        logged_in: bool,
        fields: dict[str, str],
        chosen: str,
    ) -> None:
        make_user(services, "maija@example.com")
        if logged_in:
            log_in(client, "maija@example.com")
        sessions = count(services, UserSession)
        client.cookies.set("kuitti_csrf", chosen)
        answer = client.post(path, data={**fields, "csrf_token": chosen})
        assert answer.status_code == 403
        assert count(services, UserSession) == sessions
        assert count(services, User) == 1
        assert count(services, MailMessage) == 0

    def test_a_token_of_another_session_is_refused(
        self, client: httpx.Client, services: Services, live_server: LiveServer
    ) -> None:
        make_user(services, "maija@example.com")
        make_user(services, "matti@example.com")
        log_in(client, "maija@example.com")
        maija_token = csrf_of(client.get("/account"))
        with httpx.Client(base_url=live_server.url) as other:
            log_in(other, "matti@example.com")
            other.cookies.set("kuitti_csrf", maija_token)
            assert other.post("/logout", data={"csrf_token": maija_token}).status_code == 403
            assert other.get("/account").status_code == 200
        assert client.post("/logout", data={"csrf_token": maija_token}).status_code == 303

    def test_logging_in_issues_a_token_for_the_new_session(
        self, client: httpx.Client, services: Services
    ) -> None:
        make_user(services, "maija@example.com")
        before = csrf_of(client.get("/login"))
        log_in(client, "maija@example.com")
        after = client.cookies["kuitti_csrf"]
        assert after != before
        assert client.post("/logout", data={"csrf_token": after}).status_code == 303


# The anonymous forms, with a page that issues their token and fields that would change state.
ANONYMOUS_FORMS = [
    ("/login", {"email": "maija@example.com", "password": "correct horse 1", "action": "login"}),
    ("/signup", {"email": "new@example.com", "password": "long enough 1", "action": "signup"}),
    ("/password-reset", {"email": "maija@example.com"}),
]


class TestPlantedPreLoginPair:
    """Before login a token is bound to the browser's pre-session: a genuine pair that another
    anonymous browser obtained, planted in a victim's browser, is refused."""

    @pytest.mark.parametrize(("path", "fields"), ANONYMOUS_FORMS)
    @pytest.mark.parametrize("victim_has_visited", [True, False])
    def test_another_browsers_pair_is_refused(
        self,
        client: httpx.Client,
        services: Services,
        live_server: LiveServer,
        path: str,
        fields: dict[str, str],
        victim_has_visited: bool,
    ) -> None:
        make_user(services, "maija@example.com")
        attacker_token = csrf_of(client.get(path))
        with httpx.Client(base_url=live_server.url) as victim:
            if victim_has_visited:
                csrf_of(victim.get(path))
            victim.cookies.set("kuitti_csrf", attacker_token)
            answer = victim.post(path, data={**fields, "csrf_token": attacker_token})
            assert answer.status_code == 403
            assert "kuitti_session" not in victim.cookies
        assert count(services, UserSession) == 0
        assert count(services, User) == 1
        assert count(services, MailMessage) == 0
        # The pair still works in the browser it was issued to.
        mine = client.post(path, data={**fields, "csrf_token": attacker_token})
        assert mine.status_code in {200, 303}
