"""``kuitti keys rotate`` / ``kuitti keys list`` and ``kuitti user create``, through Typer's runner
on the live server's database."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import orjson
from typer.testing import CliRunner

from kuitti.cli import app
from kuitti.services import Services
from tests.oauth.flow import connect, log_in, make_app


def kuitti(services: Services, tmp_path: Path, *args: str) -> Any:
    env = {
        "KUITTI_DATABASE_URL": services.db.url,
        "KUITTI_SECRET_KEY": str(services.settings.secret_key),
        "KUITTI_VAR_DIR": str(tmp_path),
        "KUITTI_LOG_LEVEL": "WARNING",
    }
    result = CliRunner().invoke(app, list(args), env=env)
    assert result.exit_code == 0, result.output
    lines = result.stdout.strip().splitlines()
    assert len(lines) == 1, result.stdout  # --json prints exactly one object
    return orjson.loads(lines[0])


class TestKeysAndUsers:
    def test_rotate_keeps_old_tokens_valid(
        self, client: httpx.Client, services: Services, tmp_path: Path
    ) -> None:
        created = kuitti(
            services, tmp_path, "user", "create", "--email", "Op@Example.com",
            "--password", "operator pass 1", "--json",
        )  # fmt: skip
        assert created["email"] == "op@example.com"
        assert log_in(client, "op@example.com", "operator pass 1").status_code == 303
        partner = make_app(services)
        old_token = connect(client, partner, "op@example.com")
        first_kid = client.get("/.well-known/jwks.json").json()["keys"][0]["kid"]
        services.clock.advance(1)  # type: ignore[attr-defined]
        rotated = kuitti(services, tmp_path, "keys", "rotate", "--json")
        assert rotated["algorithm"] == "ES256"
        assert rotated["keys"] == 2
        listed = kuitti(services, tmp_path, "keys", "list", "--json")
        assert {k["kid"] for k in listed["keys"]} == {first_kid, rotated["kid"]}
        jwks = client.get("/.well-known/jwks.json").json()["keys"]
        assert {k["kid"] for k in jwks} == {first_kid, rotated["kid"]}
        assert all("d" not in k for k in jwks)  # never a private part
        headers = {"SERVICE_APIKEY": partner.api_key, "Authorization": f"Bearer {old_token}"}
        assert client.get("/api/v1/receipts/", headers=headers).status_code == 200
