"""docs/operations.md, "PostgreSQL: set-up and backups": a database dumped with ``pg_dump`` and
restored with ``pg_restore`` into a new one serves its receipts to a ``kuitti serve`` started on
the copy."""

from __future__ import annotations

import secrets
import shutil
import subprocess
from pathlib import Path

import httpx
import psycopg
import pytest

from kuitti.models import PartnerRole
from kuitti.services import Services
from tests.conftest import PG_ADMIN_URL, LiveServer
from tests.factories import auth, make_partner, receipt_doc
from tests.test_serve import start, stop, wait_ready

pytestmark = [
    pytest.mark.postgres_only,
    pytest.mark.skipif(shutil.which("pg_restore") is None, reason="needs PostgreSQL's client"),
]


def test_pg_dump_restores_into_a_database_kuitti_reads(
    services: Services,
    live_server: LiveServer,
    serve: tuple[str, dict[str, str], list[str]],
    tmp_path: Path,
) -> None:
    key = make_partner(services, PartnerRole.MERCHANT).api_key
    posted = httpx.post(
        f"{live_server.url}/api/v1/receipts/", json=receipt_doc(), headers=auth(key)
    )
    assert posted.status_code == 200, posted.text
    receipt_id = posted.json()["receipt_id"]
    source = services.settings.database_url
    assert source is not None
    dump = tmp_path / "kuitti.dump"
    subprocess.run(
        ["pg_dump", "--format=custom", "--file", str(dump), source], check=True, timeout=120
    )
    name = f"kuitti_restored_{secrets.token_hex(4)}"
    restored = f"{PG_ADMIN_URL.rpartition('/')[0]}/{name}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    try:
        subprocess.run(
            ["pg_restore", "--no-owner", "--exit-on-error", "--dbname", restored, str(dump)],
            check=True, timeout=120,
        )  # fmt: skip
        url, env, args = serve
        env["KUITTI_DATABASE_URL"] = restored
        env["KUITTI_SECRET_KEY"] = str(services.settings.secret_key)
        process, log = start([*args, "--no-worker"], env, tmp_path)
        try:
            wait_ready(url, process, log)
            read = httpx.get(f"{url}/api/v1/receipts/{receipt_id}/service_json/", headers=auth(key))
        finally:
            stop(process)
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
    assert read.status_code == 200, read.text
    assert read.json() == receipt_doc()
