"""The contracts other domains use: verify_access_token, reading_connection, USER tokens,
AppConnection — against tokens issued through the real flow."""

from __future__ import annotations

import uuid

import httpx
import pytest

from kuitti.clock import FrozenClock
from kuitti.errors import InsufficientScope, Unauthorized
from kuitti.models import Connection
from kuitti.oauth.bearer import optional_connection, reading_connection
from kuitti.oauth.tokens import connection_for_user_token, verify_access_token
from kuitti.services import Services
from tests.factories import make_user
from tests.oauth.flow import connect, make_app


def read_as(services: Services, app_key: str, token: str) -> Connection:
    with services.db.session(write=False) as session:
        _, connection = reading_connection(
            session, services.settings, app_key, token, now=services.clock.now()
        )
        return connection


class TestVerifyAccessToken:
    def test_a_fresh_token_names_its_connection(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        with services.db.session(write=False) as session:
            connection = verify_access_token(
                session, services.settings, token, now=services.clock.now()
            )
        assert connection.user_id == user.id
        assert connection.partner_id == app.partner.id
        assert connection.scopes == {"receipt:read"}

    def test_a_removed_connection_fails_on_the_next_check(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        with services.db.session() as session:
            connection = verify_access_token(session, services.settings, token)
            connection.revoked_at = services.clock.now()
        with services.db.session(write=False) as session, pytest.raises(Unauthorized):
            verify_access_token(session, services.settings, token)

    def test_garbage_is_unauthorized(self, services: Services) -> None:
        with services.db.session(write=False) as session, pytest.raises(Unauthorized):
            verify_access_token(session, services.settings, "not.a.jwt")


class TestReadingConnection:
    def test_reads_for_the_user_with_the_partner_key(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        user = make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        reading = read_as(services, app.api_key, token)
        assert reading.partner_id == app.partner.id
        assert reading.user_id == user.id

    def test_another_partners_key_is_unauthorized(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        other = make_app(services, name="Toinen")
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        with pytest.raises(Unauthorized):
            read_as(services, other.api_key, token)

    def test_a_write_only_token_may_not_read(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com", scope="receipt:write")
        with pytest.raises(InsufficientScope):
            read_as(services, app.api_key, token)


class TestUserToken:
    def test_write_scope_gives_the_connection(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com", scope="receipt:read receipt:write")
        with services.db.session(write=False) as session:
            connection = connection_for_user_token(session, services.settings, token)
        assert isinstance(connection, Connection)

    def test_read_only_or_invalid_gives_none(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com", scope="receipt:read")
        with services.db.session(write=False) as session:
            assert connection_for_user_token(session, services.settings, token) is None
            assert connection_for_user_token(session, services.settings, token + "x") is None


class TestOptionalConnection:
    def test_none_without_a_bearer_header(self, services: Services) -> None:
        app = make_app(services)
        with services.db.session(write=False) as session:
            assert optional_connection(session, services.settings, None, app.partner) is None
            assert optional_connection(session, services.settings, "Token abc", app.partner) is None

    def test_another_partners_token_is_refused(
        self, client: httpx.Client, services: Services, clock: FrozenClock
    ) -> None:
        app = make_app(services)
        other = make_app(services, name="Toinen")
        make_user(services, "maija@example.com")
        token = connect(client, app, "maija@example.com")
        with services.db.session(write=False) as session:
            found = optional_connection(
                session, services.settings, f"Bearer {token}", app.partner, now=clock.now()
            )
            assert found is not None
            assert found.id == uuid.UUID(str(found.id))
            with pytest.raises(Unauthorized):
                optional_connection(session, services.settings, f"Bearer {token}", other.partner)
