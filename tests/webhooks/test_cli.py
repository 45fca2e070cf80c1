"""``kuitti webhooks list`` and ``kuitti webhooks replay``, run as the real console script."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest
from typer.testing import CliRunner

from kuitti.cli import app
from kuitti.clock import FrozenClock
from kuitti.models.outbox import DeliveryStatus
from kuitti.services import Services
from tests.webhooks.receivers import Behaviour, Receiver
from tests.webhooks.support import deliver, delivery, queue, webhook_partner, with_settings

KUITTI = str(Path(sys.executable).parent / "kuitti")


def cli_env(services: Services, tmp_path: Path) -> dict[str, str]:
    return {
        "KUITTI_DATABASE_URL": services.db.url,
        "KUITTI_SECRET_KEY": str(services.settings.secret_key),
        "KUITTI_VAR_DIR": str(tmp_path),
        "KUITTI_LOG_LEVEL": "WARNING",
    }


@dataclass(frozen=True)
class Ran:
    returncode: int
    stdout: str
    stderr: str


def kuitti(services: Services, tmp_path: Path, *args: str) -> Ran:
    """``kuitti webhooks …`` in this process (Typer's runner); one test below runs the real
    console script in a subprocess too."""
    result = CliRunner().invoke(app, ["webhooks", *args], env=cli_env(services, tmp_path))
    return Ran(result.exit_code, result.stdout, result.stderr)


def as_json(result: Ran) -> Any:
    assert result.returncode == 0, result.stderr
    return orjson.loads(result.stdout)


@pytest.fixture
def log(services: Services) -> dict[str, Any]:
    """Three deliveries: one pending after a 500, one delivered, one failed for good."""
    with (
        Receiver(default=Behaviour(status=500)) as broken,
        Receiver() as fine,
        Receiver(default=Behaviour(status=410)) as gone,
    ):
        retrying = webhook_partner(services, broken.url, name="Rikki")
        ok = webhook_partner(services, fine.url, name="Kunnossa")
        dead = webhook_partner(services, gone.url, name="Poissa")
        ids = {
            "pending": queue(services, retrying),
            "delivered": queue(services, ok),
            "failed": queue(services, dead),
        }
        once = with_settings(services, webhook_retry_schedule=(60,))
        deliver(once)
        with services.db.session() as session:  # only the dead one is retried to its end
            from kuitti.models import WebhookDelivery

            row = session.get(WebhookDelivery, ids["failed"])
            assert row is not None
            row.next_attempt_at = services.clock.now()
        deliver(once)
    return {"ids": ids, "partners": {"dead": dead, "ok": ok}}


class TestList:
    def test_json_shape(self, services: Services, tmp_path: Path, log: dict[str, Any]) -> None:
        out = as_json(kuitti(services, tmp_path, "list", "--json"))
        assert set(out) == {"deliveries"}
        by_id = {d["delivery_id"]: d for d in out["deliveries"]}
        ids = log["ids"]
        assert set(by_id) == {str(i) for i in ids.values()}
        for entry in by_id.values():
            assert set(entry) == {
                "delivery_id",
                "partner_id",
                "notification_type",
                "status",
                "attempts",
                "next_attempt_at",
            }
            for attempt in entry["attempts"]:
                assert set(attempt) == {"at", "status_code", "latency_ms", "error"}
                assert isinstance(attempt["latency_ms"], int)
        pending = by_id[str(ids["pending"])]
        assert pending["status"] == "pending"
        assert pending["notification_type"] == "receipt_notification"
        assert [a["status_code"] for a in pending["attempts"]] == [500]
        assert pending["attempts"][0]["error"] == "HTTP 500"
        row = delivery(services, ids["pending"])
        assert pending["next_attempt_at"] == row.next_attempt_at.isoformat()
        delivered = by_id[str(ids["delivered"])]
        assert delivered["status"] == "delivered"
        assert delivered["next_attempt_at"] is None
        assert delivered["attempts"][0]["error"] is None
        assert [a["status_code"] for a in by_id[str(ids["failed"])]["attempts"]] == [410, 410]
        assert by_id[str(ids["failed"])]["status"] == "failed"

    def test_filters(self, services: Services, tmp_path: Path, log: dict[str, Any]) -> None:
        failed = as_json(kuitti(services, tmp_path, "list", "--status", "failed", "--json"))
        assert [d["delivery_id"] for d in failed["deliveries"]] == [str(log["ids"]["failed"])]
        ok_partner = str(log["partners"]["ok"].partner.id)
        mine = as_json(kuitti(services, tmp_path, "list", "--partner", ok_partner, "--json"))
        assert [d["partner_id"] for d in mine["deliveries"]] == [ok_partner]
        bad = kuitti(services, tmp_path, "list", "--status", "lost")
        assert bad.returncode != 0

    def test_human_output(self, services: Services, tmp_path: Path, log: dict[str, Any]) -> None:
        result = kuitti(services, tmp_path, "list")
        assert result.returncode == 0, result.stderr
        assert str(log["ids"]["pending"]) in result.stdout
        assert "HTTP 500" in result.stdout


class TestReplay:
    def test_failed_delivery_is_sent_again_with_the_same_id(
        self, services: Services, clock: FrozenClock, tmp_path: Path, log: dict[str, Any]
    ) -> None:
        failed_id = log["ids"]["failed"]
        out = as_json(kuitti(services, tmp_path, "replay", str(failed_id), "--json"))
        assert out["delivery_id"] == str(failed_id)
        assert out["status"] == "pending"
        assert len(out["attempts"]) == 2  # the log keeps earlier attempts
        row = delivery(services, failed_id)
        assert row.status == DeliveryStatus.PENDING
        assert row.attempt_count == 0  # a fresh retry schedule
        with Receiver() as fixed:
            from kuitti.models import Partner

            with services.db.session() as session:  # the partner fixed its endpoint
                partner = session.get(Partner, log["partners"]["dead"].partner.id)
                assert partner is not None
                partner.webhook_url = fixed.url
            clock.set(row.next_attempt_at)  # the CLI's "now" is the real clock
            deliver(services)
            [call] = fixed.wait_for(1)
        assert call.webhook_id == str(failed_id)
        assert len(fixed.received) == 1
        assert delivery(services, failed_id).status == DeliveryStatus.DELIVERED

    def test_human_and_unknown(
        self, services: Services, tmp_path: Path, log: dict[str, Any]
    ) -> None:
        done = kuitti(services, tmp_path, "replay", str(log["ids"]["delivered"]))
        assert done.returncode == 0, done.stderr
        assert "pending again" in done.stdout
        missing = kuitti(services, tmp_path, "replay", str(uuid.uuid4()))
        assert missing.returncode == 2
        assert "no webhook delivery" in missing.stderr


class TestConsoleScript:
    def test_real_console_script(
        self, services: Services, tmp_path: Path, log: dict[str, Any]
    ) -> None:
        env = {**os.environ, **cli_env(services, tmp_path)}
        result = subprocess.run(
            [KUITTI, "webhooks", "list", "--status", "delivered", "--json"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        out = orjson.loads(result.stdout)
        assert [d["delivery_id"] for d in out["deliveries"]] == [str(log["ids"]["delivered"])]
