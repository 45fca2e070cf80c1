"""``/membership``: only the owner acts, only to registered addresses."""

from __future__ import annotations

import uuid
from urllib.parse import parse_qs, urlsplit

import httpx
import orjson
import pytest
from sqlalchemy import select

from kuitti.models import Connection, WebhookDelivery
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from tests.factories import make_user
from tests.oauth.flow import (
    REDIRECT_URI,
    auth_params,
    code_from,
    consent,
    csrf_of,
    exchange,
    log_in,
    make_app,
    state_of,
)

RETURN = "https://bank.example/settings/done"


def connected(client: httpx.Client, services: Services) -> tuple[NewPartner, str]:
    app = make_app(
        services, redirect_uris=[REDIRECT_URI, RETURN], webhook_url="http://127.0.0.1:9/hook"
    )
    make_user(services, "maija@example.com")
    log_in(client, "maija@example.com")
    code, _ = code_from(consent(client, auth_params(app, state=state_of(None, customer="c-7"))))
    claims = exchange(client, app, code).json()
    return app, claims["service_id"]


def act(
    client: httpx.Client, service_id: str, action: str, *scopes: str, redirect_uri: str = RETURN
) -> httpx.Response:
    page = client.get("/membership", params={"service_id": service_id, "redirect_uri": RETURN})
    assert page.status_code == 200, page.text
    data: dict[str, str | list[str]] = {
        "service_id": service_id,
        "redirect_uri": redirect_uri,
        "action": action,
        "csrf_token": csrf_of(page),
    }
    if scopes:
        data["scope"] = list(scopes)
    return client.post("/membership", data=data)


def connection(services: Services, service_id: str) -> Connection:
    with services.db.session(write=False) as session:
        row = session.get(Connection, uuid.UUID(service_id))
        assert row is not None
        return row


def revoke_events(services: Services) -> list[dict[str, object]]:
    with services.db.session(write=False) as session:
        rows = session.scalars(
            select(WebhookDelivery).where(
                WebhookDelivery.notification_type == "oauth_authorization_revoke"
            )
        )
        return [orjson.loads(r.payload) for r in rows]


class TestMembership:
    def test_keep_redirects_cancelled(self, client: httpx.Client, services: Services) -> None:
        _app, service_id = connected(client, services)
        answer = act(client, service_id, "keep")
        assert answer.status_code == 303
        location = urlsplit(answer.headers["location"])
        assert f"{location.scheme}://{location.netloc}{location.path}" == RETURN
        assert parse_qs(location.query) == {"status": ["cancelled"], "service_id": [service_id]}
        assert connection(services, service_id).scope == "receipt:read"

    def test_modify_changes_the_scopes(self, client: httpx.Client, services: Services) -> None:
        _app, service_id = connected(client, services)
        answer = act(client, service_id, "modify", "receipt:read", "receipt:write")
        assert parse_qs(urlsplit(answer.headers["location"]).query)["status"] == ["modified"]
        assert connection(services, service_id).scope == "receipt:read receipt:write"

    def test_modify_to_nothing_is_refused(self, client: httpx.Client, services: Services) -> None:
        _app, service_id = connected(client, services)
        assert act(client, service_id, "modify").status_code == 400
        assert connection(services, service_id).scope == "receipt:read"

    def test_remove_revokes_and_tells_the_partner(
        self, client: httpx.Client, services: Services
    ) -> None:
        app, service_id = connected(client, services)
        answer = act(client, service_id, "remove")
        assert parse_qs(urlsplit(answer.headers["location"]).query)["status"] == ["removed"]
        assert not connection(services, service_id).active
        assert revoke_events(services) == [
            {
                "notification_type": "oauth_authorization_revoke",
                "service_id": service_id,
                "partner_metadata": {"customer": "c-7"},
            }
        ]
        # The page now shows nothing about it.
        page = client.get("/membership", params={"service_id": service_id, "redirect_uri": RETURN})
        assert page.status_code == 404
        assert app.partner.name not in page.text

    @pytest.mark.parametrize(
        "redirect_uri",
        ["https://evil.example/", RETURN + "/x", RETURN + "?a=1", "//evil.example", "/account"],
    )
    def test_an_unregistered_redirect_uri_never_redirects(
        self, client: httpx.Client, services: Services, redirect_uri: str
    ) -> None:
        _app, service_id = connected(client, services)
        page = client.get(
            "/membership", params={"service_id": service_id, "redirect_uri": redirect_uri}
        )
        assert page.status_code == 400
        assert "location" not in page.headers
        answer = act(client, service_id, "remove", redirect_uri=redirect_uri)
        assert answer.status_code == 400
        assert "location" not in answer.headers
        assert connection(services, service_id).active
        assert revoke_events(services) == []

    def test_another_users_connection_shows_nothing(
        self, client: httpx.Client, services: Services
    ) -> None:
        app, service_id = connected(client, services)
        make_user(services, "matti@example.com")
        with httpx.Client(base_url=client.base_url) as other:
            log_in(other, "matti@example.com")
            page = other.get(
                "/membership", params={"service_id": service_id, "redirect_uri": RETURN}
            )
            assert page.status_code == 404
            assert app.partner.name not in page.text
            assert "receipt:read" not in page.text
            token_page = other.get("/login", params={"next": "/account"})
            csrf = other.cookies.get("kuitti_csrf") or csrf_of(token_page)
            answer = other.post(
                "/membership",
                data={
                    "service_id": service_id,
                    "redirect_uri": RETURN,
                    "action": "remove",
                    "csrf_token": csrf,
                },
            )
            assert answer.status_code == 404
        assert connection(services, service_id).active

    def test_logged_out_users_are_sent_to_login_and_back(
        self, client: httpx.Client, services: Services
    ) -> None:
        _app, service_id = connected(client, services)
        with httpx.Client(base_url=client.base_url) as fresh:
            answer = fresh.get(
                "/membership", params={"service_id": service_id, "redirect_uri": RETURN}
            )
            assert answer.status_code == 303
            location = answer.headers["location"]
            assert location.startswith("/login?next=%2Fmembership%3Fservice_id%3D")
            back = log_in(
                fresh, "maija@example.com", next=parse_qs(urlsplit(location).query)["next"][0]
            )
            assert back.headers["location"].startswith("/membership?service_id=")

    def test_without_csrf_nothing_changes(self, client: httpx.Client, services: Services) -> None:
        _app, service_id = connected(client, services)
        answer = client.post(
            "/membership",
            data={"service_id": service_id, "redirect_uri": RETURN, "action": "remove"},
        )
        assert answer.status_code == 403
        assert connection(services, service_id).active
