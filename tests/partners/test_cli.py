"""``kuitti partner update / rotate / disable / enable``: what the operator changes takes effect
on the running server at once."""

from __future__ import annotations

import uuid

import httpx
import pytest

from kuitti.models import Partner, PartnerRole
from kuitti.security import SecretBox
from kuitti.services import Services
from kuitti.webhooks.worker import claim_due
from tests.factories import auth, make_partner, make_user
from tests.oauth.flow import connect, make_app
from tests.test_cli import run, run_json
from tests.webhooks.support import queue

BAD_CODE = {"grant_type": "authorization_code", "code": "no-such-code"}


def stored(services: Services, partner_id: uuid.UUID) -> Partner:
    with services.db.session(write=False) as session:
        partner = session.get(Partner, partner_id)
        assert partner is not None
        session.expunge(partner)
        return partner


def token_call(client: httpx.Client, client_id: str | None, secret: str) -> httpx.Response:
    return client.post("/api/oauth/token", data=BAD_CODE, auth=(client_id or "", secret))


class TestUpdate:
    def test_changes_settings_and_prints_the_partner_as_listed(self, services: Services) -> None:
        app = make_app(services, webhook_url="https://hooks.example/a")
        pid = str(app.partner.id)
        data = run_json(
            services, "partner", "update", pid, "--name", "Uusi nimi",
            "--iban", "FI21 1234 5600 0007 85", "--bic", "nordfihh",
            "--add-redirect-uri", "https://bank.example/second",
            "--remove-redirect-uri", "https://bank.example/oauth/callback",
            "--attachments", "--webhook-url", "https://hooks.example/b",
        )  # fmt: skip
        listed = run_json(services, "partner", "list")["partners"]
        assert [data] == listed
        assert data["name"] == "Uusi nimi"
        assert data["iban"] == "FI2112345600000785"
        assert data["bic"] == "NORDFIHH"
        assert data["redirect_uris"] == ["https://bank.example/second"]
        assert data["attachments"] is True
        assert data["webhook_url"] == "https://hooks.example/b"
        # A new webhook URL gets no new key.
        box = SecretBox(services.settings.resolved_secret_key)
        sealed = stored(services, app.partner.id).webhook_key_sealed
        assert sealed is not None
        assert box.open(sealed) == app.webhook_key

    def test_a_bad_value_changes_nothing(self, services: Services) -> None:
        merchant = make_partner(services)
        result = run(services, "partner", "update", str(merchant.partner.id), "--name", "B",
                     "--iban", "FI00 0000")  # fmt: skip
        assert result.exit_code == 2
        assert "IBAN" in result.output
        assert stored(services, merchant.partner.id).name == "Kauppa Oy"

    def test_an_unknown_partner(self, services: Services) -> None:
        result = run(services, "partner", "update", str(uuid.uuid4()), "--name", "B")
        assert result.exit_code == 2
        assert "no partner" in result.output


class TestRotate:
    def test_api_key_old_refused_at_once(self, client: httpx.Client, services: Services) -> None:
        merchant = make_partner(services)
        assert client.get("/api/v1/receipts/", headers=auth(merchant.api_key)).status_code == 200
        data = run_json(
            services, "partner", "rotate", str(merchant.partner.id), "--secret", "api_key"
        )
        assert set(data) == {"partner_id", "api_key"}
        assert client.get("/api/v1/receipts/", headers=auth(merchant.api_key)).status_code == 401
        assert client.get("/api/v1/receipts/", headers=auth(data["api_key"])).status_code == 200

    def test_client_secret_old_refused_at_once(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_app(services)
        client_id, old = app.partner.client_id, app.client_secret or ""
        assert token_call(client, client_id, old).json()["error"] == "invalid_grant"
        data = run_json(
            services, "partner", "rotate", str(app.partner.id), "--secret", "client_secret"
        )
        assert set(data) == {"partner_id", "client_secret"}
        assert token_call(client, client_id, old).json()["error"] == "invalid_client"
        assert token_call(client, client_id, data["client_secret"]).json()["error"] == (
            "invalid_grant"
        )

    def test_webhook_key(self, services: Services) -> None:
        app = make_app(services, webhook_url="https://hooks.example/a")
        data = run_json(
            services, "partner", "rotate", str(app.partner.id), "--secret", "webhook_key"
        )
        assert set(data) == {"partner_id", "webhook_key"}
        assert data["webhook_key"] != app.webhook_key
        box = SecretBox(services.settings.resolved_secret_key)
        sealed = stored(services, app.partner.id).webhook_key_sealed
        assert sealed is not None
        assert box.open(sealed) == data["webhook_key"]

    def test_a_merchant_has_no_client_secret(self, services: Services) -> None:
        merchant = make_partner(services)
        result = run(services, "partner", "rotate", str(merchant.partner.id),
                     "--secret", "client_secret")  # fmt: skip
        assert result.exit_code == 2


class TestDisable:
    def test_everything_is_refused_then_restored(
        self, client: httpx.Client, services: Services
    ) -> None:
        app = make_partner(
            services,
            PartnerRole.APP,
            PartnerRole.MERCHANT,
            redirect_uris=["https://bank.example/oauth/callback"],
            webhook_url="https://hooks.example/a",
        )
        make_user(services, "maija@example.com")
        access_token = connect(client, app, "maija@example.com")
        reader = {"SERVICE_APIKEY": app.api_key, "Authorization": f"Bearer {access_token}"}
        queue(services, app)
        pid = str(app.partner.id)

        assert run(services, "partner", "disable", pid).exit_code == 0
        assert client.get("/api/v1/receipts/", headers=auth(app.api_key)).status_code == 401
        assert client.get("/api/v1/receipts/", headers=reader).status_code == 401
        assert (
            token_call(client, app.partner.client_id, app.client_secret or "").json()["error"]
            == "invalid_client"
        )
        assert claim_due(services) == []  # the webhook waits
        assert run_json(services, "partner", "list")["partners"][0]["disabled"] is True

        assert run(services, "partner", "enable", pid).exit_code == 0
        assert client.get("/api/v1/receipts/", headers=auth(app.api_key)).status_code == 200
        assert client.get("/api/v1/receipts/", headers=reader).status_code == 200
        assert (
            token_call(client, app.partner.client_id, app.client_secret or "").json()["error"]
            == "invalid_grant"
        )
        assert [claim.partner_id for claim in claim_due(services)] == [app.partner.id]


@pytest.mark.parametrize("command", ["disable", "enable", "rotate"])
def test_commands_need_a_partner_id(services: Services, command: str) -> None:
    assert run(services, "partner", command).exit_code != 0
