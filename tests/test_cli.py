"""The operator command line, run in-process through Typer's runner with real settings."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import httpx
import orjson
import pytest
from sqlalchemy import func, select
from typer.testing import CliRunner

from kuitti import __version__, cli, config
from kuitti.cli import COMMANDS, app, load_command
from kuitti.config import Settings, default_var_dir
from kuitti.models import Partner, User
from kuitti.security import SecretBox, hash_secret
from kuitti.services import Services
from tests.conftest import LiveServer, free_port
from tests.test_serve import KUITTI

runner = CliRunner()


def run(services: Services, *args: str, **env: str) -> Any:
    environment = {
        "KUITTI_DATABASE_URL": services.settings.database_url or "",
        "KUITTI_SECRET_KEY": services.settings.resolved_secret_key,
        "KUITTI_VAR_DIR": str(services.settings.var_dir),
        "KUITTI_LOG_LEVEL": "WARNING",
        **env,
    }
    return runner.invoke(app, list(args), env=environment)


def run_json(services: Services, *args: str, **env: str) -> dict[str, Any]:
    result = run(services, *args, "--json", **env)
    assert result.exit_code == 0, result.output
    data: dict[str, Any] = orjson.loads(result.stdout)
    return data


class TestPartnerCreate:
    def test_merchant_json_output(self, services: Services) -> None:
        data = run_json(
            services, "partner", "create", "--name", "Kauppa Oy", "--role", "merchant",
            "--namespace", "kauppa", "--namespace", "kauppa-2",
        )  # fmt: skip
        assert set(data) == {
            "partner_id", "name", "roles", "api_key", "client_id", "namespaces", "webhook_url",
            "sandbox",
        }  # fmt: skip
        assert data["roles"] == ["merchant"]
        assert data["namespaces"] == ["kauppa", "kauppa-2"]
        assert data["client_id"] is None
        with services.db.session(write=False) as session:
            partner = session.get(Partner, uuid.UUID(data["partner_id"]))
            assert partner is not None
            # Only the digest is stored, never the key itself.
            assert partner.api_key_hash == hash_secret(data["api_key"])
            assert (
                data["api_key"]
                not in orjson.dumps(
                    {c.name: str(getattr(partner, c.name)) for c in Partner.__table__.columns}
                ).decode()
            )

    def test_app_with_webhook_gets_every_secret(self, services: Services) -> None:
        data = run_json(
            services, "partner", "create", "--name", "Expense App", "--role", "app",
            "--role", "merchant", "--redirect-uri", "https://app.example/cb",
            "--webhook-url", "https://app.example/hooks",
        )  # fmt: skip
        assert data["roles"] == ["app", "merchant"]
        assert data["client_id"].startswith("kc_")
        assert data["client_secret"].startswith("kcs_")
        assert data["webhook_key"].startswith("whsec_")
        assert data["webhook_url"] == "https://app.example/hooks"
        with services.db.session(write=False) as session:
            partner = session.get(Partner, uuid.UUID(data["partner_id"]))
            assert partner is not None
            assert partner.client_secret_hash == hash_secret(data["client_secret"])
            assert partner.webhook_key_sealed != data["webhook_key"]
            box = SecretBox(services.settings.resolved_secret_key)
            assert partner.webhook_key_sealed is not None
            assert box.open(partner.webhook_key_sealed) == data["webhook_key"]

    def test_public_client_has_no_secret(self, services: Services) -> None:
        data = run_json(
            services, "partner", "create", "--name", "Mobile", "--role", "app", "--public-client",
            "--redirect-uri", "http://localhost:8765/cb",
        )  # fmt: skip
        assert "client_secret" not in data
        assert data["client_id"]

    @pytest.mark.parametrize(
        ("args", "message"),
        [
            (["--namespace", "Bad Space"], "namespace"),
            (["--webhook-url", "http://hooks.example/x"], "https"),
            (["--redirect-uri", "http://evil.example/cb"], "localhost"),
            (["--iban", "FI2112345600000786"], "check digits"),
        ],
    )
    def test_invalid_options_fail_clearly(
        self, services: Services, args: list[str], message: str
    ) -> None:
        result = run(
            services, "partner", "create", "--name", "X", "--role", "merchant", *args,
            KUITTI_WEBHOOK_ALLOW_INSECURE="false",
        )  # fmt: skip
        assert result.exit_code == 2
        assert message in result.output
        with services.db.session(write=False) as session:
            assert session.scalars(select(Partner)).first() is None

    def test_unknown_role_is_refused(self, services: Services) -> None:
        result = run(services, "partner", "create", "--name", "X", "--role", "wizard")
        assert result.exit_code != 0

    def test_namespace_taken(self, services: Services) -> None:
        run_json(
            services, "partner", "create", "--name", "A", "--role", "merchant", "--namespace", "ns"
        )
        result = run(
            services, "partner", "create", "--name", "B", "--role", "merchant", "--namespace", "ns"
        )
        assert result.exit_code == 2
        assert "belongs to another partner" in result.output


def test_partner_list_shows_no_secrets(services: Services) -> None:
    created = run_json(
        services, "partner", "create", "--name", "Kauppa", "--role", "merchant", "--role", "app",
        "--webhook-url", "https://x.example/h", "--redirect-uri", "https://x.example/cb",
    )  # fmt: skip
    listed = run_json(services, "partner", "list")
    assert [p["partner_id"] for p in listed["partners"]] == [created["partner_id"]]
    text = orjson.dumps(listed).decode()
    for secret in ("api_key", "client_secret", "webhook_key"):
        assert created[secret] not in text


def test_user_create(services: Services) -> None:
    data = run_json(
        services, "user", "create", "--email", "Maija@Example.com", "--password", "s3cret-pass"
    )
    assert data["email"] == "maija@example.com"
    with services.db.session(write=False) as session:
        user = session.get(User, uuid.UUID(data["user_id"]))
        assert user is not None
        assert user.email_verified_at is not None
        assert user.password_hash.startswith("$argon2id$")
    again = run(
        services, "user", "create", "--email", "maija@example.com", "--password", "another-1"
    )
    assert again.exit_code == 2
    assert "already exists" in again.output


def test_user_create_refuses_short_password(services: Services) -> None:
    result = run(services, "user", "create", "--email", "a@example.com", "--password", "short")
    assert result.exit_code == 2


def test_demo_output_runs_as_printed(
    services: Services, live_server: LiveServer, tmp_path: Path
) -> None:
    """A used database takes another demo set; what the demo prints runs in bash as it is."""
    first = run(services, "demo", KUITTI_PUBLIC_URL=live_server.url)
    assert first.exit_code == 0, first.output
    result = run(services, "demo", KUITTI_PUBLIC_URL=live_server.url)
    assert result.exit_code == 0, result.output
    assert "/ns/demokauppa-" in result.output
    shell = subprocess.run(
        ["bash", "-euo", "pipefail", "-c", result.stdout],
        cwd=tmp_path, capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    document, auth, query = shell.stdout.strip().rpartition(f"{live_server.url}/auth")
    consent_url = auth + query
    assert orjson.loads(document)["receiptNumber"] == "DEMO-0001"
    assert (tmp_path / "receipt.pdf").read_bytes().startswith(b"%PDF")
    assert b"<Finvoice" in (tmp_path / "finvoice.xml").read_bytes()
    assert (tmp_path / "finvoice.pdf").read_bytes().startswith(b"%PDF")
    consent = httpx.get(consent_url)
    assert consent.status_code == 200, consent.text
    assert "Demo Expense App" in consent.text
    with services.db.session(write=False) as session:
        assert session.scalar(select(func.count()).select_from(Partner)) == 4


def test_db_upgrade_is_idempotent(services: Services) -> None:
    result = run(services, "db", "upgrade")
    assert result.exit_code == 0, result.output
    assert "newest revision" in result.output


def test_db_upgrade_imports_neither_the_application_nor_alembics_environment(
    services: Services,
) -> None:
    """A no-op upgrade checks the revision: the web app, the worker, PDF rendering and the
    models (which Alembic's environment imports) took seconds to import, every deploy."""
    code = (
        "import sys; from typer.testing import CliRunner; from kuitti.cli import app; "
        "result = CliRunner().invoke(app, ['db', 'upgrade']); "
        "assert result.exit_code == 0, result.output; "
        "print(sorted(m for m in sys.modules if m.startswith(('kuitti', 'fastapi', 'uvicorn', "
        "'reportlab'))))"
    )
    env = {**os.environ, "KUITTI_DATABASE_URL": services.settings.database_url or ""}
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert "'kuitti.dbmigrate'" in loaded
    for module in (
        "fastapi",
        "uvicorn",
        "reportlab",
        "kuitti.app",
        "kuitti.worker",
        "kuitti.models",
    ):
        assert f"'{module}'" not in loaded, module


def test_invalid_settings_name_the_variable(services: Services) -> None:
    result = run(services, "partner", "list", KUITTI_MAX_BODY_BYTES="lots")
    assert result.exit_code == 2
    assert "KUITTI_MAX_BODY_BYTES" in result.output


@pytest.mark.parametrize(
    ("database_url", "message"),
    [
        ("mysql://x", "error: invalid settings: KUITTI_DATABASE_URL: "),
        (
            "postgresql://kuitti@db1:5432,db2:5432/kuitti?target_session_attr=read-write",
            "error: invalid settings: KUITTI_DATABASE_URL: not a PostgreSQL URL "
            'libpq takes: invalid URI query parameter: "target_session_attr"',
        ),
        (
            f"postgresql://kuitti:secret@127.0.0.1:{free_port()}/kuitti",
            "error: cannot connect to the database postgresql+psycopg://kuitti:***@127.0.0.1:",
        ),
    ],
    ids=["unsupported", "misspelt-libpq-parameter", "unreachable"],
)
@pytest.mark.parametrize("command", [["partner", "list"], ["serve"], ["db", "upgrade"]])
def test_database_mistakes_are_one_line(
    tmp_path: Path, database_url: str, message: str, command: list[str]
) -> None:
    """The console script as an operator runs it: one line, exit 2, no traceback."""
    env = {**os.environ, "KUITTI_DATABASE_URL": database_url, "KUITTI_VAR_DIR": str(tmp_path)}
    result = subprocess.run(
        [KUITTI, *command], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith(message)
    assert result.stderr.count("\n") == 1, result.stderr
    assert "secret" not in result.stderr


def test_lazy_commands_load_as_listed() -> None:
    """Each command ``kuitti --help`` lists without importing it is the one that runs."""
    for name, spec in COMMANDS.items():
        command = load_command(name)
        assert (command.help or "").split("\n\n")[0].replace("\n", " ") == spec.help, name


@pytest.mark.parametrize("command", [[], ["serve"], ["partner", "create"]])
def test_help_imports_no_command_module(command: list[str]) -> None:
    code = (
        "import sys; from typer.testing import CliRunner; from kuitti.cli import app; "
        f"assert CliRunner().invoke(app, [*{command!r}, '--help']).exit_code == 0; "
        "print(sorted(m for m in sys.modules if m.startswith(('kuitti.', 'fastapi', 'uvicorn'))))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    for module in (
        "fastapi",
        "uvicorn",
        "kuitti.app",
        "kuitti.cards.cli",
        "kuitti.partners.cli",
        "kuitti.service_cli",
    ):
        assert f"'{module}'" not in loaded


def kuitti_run(
    tmp_path: Path, *args: str, cwd: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """The console script as an operator runs it, in its own process."""
    environment = {**os.environ, "KUITTI_VAR_DIR": str(tmp_path / "var")}
    environment.pop("KUITTI_DATABASE_URL", None)
    environment.pop("KUITTI_SECRET_KEY", None)
    environment.update(env or {})
    return subprocess.run(
        [KUITTI, *args], env=environment, cwd=cwd or tmp_path, capture_output=True, text=True,
        timeout=120,
    )  # fmt: skip


@pytest.mark.parametrize(
    ("args", "env", "message"),
    [
        (["serve", "--port", "99999"], {}, "error: Invalid value for '--port': "),
        (["serve", "--port", "-1"], {}, "error: Invalid value for '--port': "),
        (["serve", "--port", "abc"], {}, "error: Invalid value for '--port': "),
        (["partner", "lst"], {}, "error: No such command 'lst'."),
        (
            ["partner", "list"],
            {"KUITTI_VAR_DIR": "/etc/passwd/var"},
            "error: invalid settings: KUITTI_VAR_DIR: /etc/passwd/var is under /etc/passwd, "
            "which is not a directory",
        ),
        (
            ["serve"],
            {"KUITTI_VAR_DIR": "/nonexistent/dir"},
            "error: invalid settings: KUITTI_VAR_DIR: /nonexistent/dir does not exist",
        ),
        (
            ["partner", "list"],
            {"KUITTI_DATABASE_URL": "sqlite:////etc/passwd/db/kuitti.db"},
            "error: invalid settings: KUITTI_DATABASE_URL: /etc/passwd/db is under /etc/passwd",
        ),
        (
            ["partner", "list"],
            {"KUITTI_SECRET_KEY": "short"},
            "error: invalid settings: KUITTI_SECRET_KEY: must be at least 32 bytes",
        ),
    ],
    ids=[
        "port-too-big", "port-negative", "port-not-a-number", "unknown-command",
        "var-dir-under-a-file", "var-dir-missing-parent", "sqlite-under-a-file", "short-secret",
    ],
)  # fmt: skip
def test_configuration_mistakes_are_one_line(
    tmp_path: Path, args: list[str], env: dict[str, str], message: str
) -> None:
    result = kuitti_run(tmp_path, *args, env=env)
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    assert result.stderr.startswith(message), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr
    assert not (tmp_path / "var").exists()  # nothing was made


def test_the_cli_says_which_database_and_warns_before_making_one(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    first = kuitti_run(tmp_path, "partner", "create", "--name", "Kauppa", "--role", "merchant")
    assert first.returncode == 0, first.stderr
    database = tmp_path / "var" / "kuitti.db"
    assert first.stderr.splitlines() == [
        f"kuitti: no database at {database}: creating a new one (KUITTI_VAR_DIR or "
        "KUITTI_DATABASE_URL names another)",
        f"kuitti: generated a new server secret in {tmp_path / 'var' / 'secret_key'} (every "
        "process that shares this database needs the same one: KUITTI_SECRET_KEY)",
    ]
    again = kuitti_run(tmp_path, "partner", "list", cwd=elsewhere)
    assert again.returncode == 0, again.stderr
    assert again.stderr.splitlines() == [f"kuitti: database {database}"]
    assert "Kauppa" in again.stdout
    assert list(elsewhere.iterdir()) == []


def test_default_state_is_one_place_whatever_the_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUITTI_VAR_DIR", raising=False)
    monkeypatch.chdir(tmp_path)
    assert Settings().var_dir == config.PROJECT_DIR / "var"  # a checkout keeps its own var/
    monkeypatch.setattr(config, "PROJECT_DIR", tmp_path)  # an installed kuitti: no checkout
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
    assert default_var_dir() == tmp_path / "data" / "kuitti"


def test_stored_help_is_what_every_command_prints(monkeypatch: pytest.MonkeyPatch) -> None:
    """``kuitti/cli_help.json`` answers --help without importing the commands: it must be what
    the commands print themselves (``python -m kuitti.cli`` writes it anew)."""
    stored = orjson.loads(cli.HELP_FILE.read_bytes())
    assert stored == cli.help_texts(), "run: .venv/bin/python -m kuitti.cli"
    monkeypatch.setattr(cli, "HELP_FILE", Path("no-such-file.json"))  # the commands themselves
    for path, text in stored.items():
        printed = runner.invoke(app, [*path.split(), "--help"], prog_name="kuitti")
        assert printed.exit_code == 0, path
        assert printed.stdout == text + "\n", path
    assert max(len(line) for text in stored.values() for line in text.splitlines()) <= 100


def test_help_is_never_cut_at_80_columns() -> None:
    help_text = subprocess.run(
        [KUITTI, "partner", "create", "--help"], capture_output=True, text=True, check=True
    ).stdout
    assert "[default: no-public-client]" in help_text.replace("no-\n", "no-").replace(" " * 34, "")
    assert "…" not in help_text


@pytest.mark.parametrize(
    ("database_url", "read_url", "message"),
    [
        (
            None,
            "postgresql://kuitti@127.0.0.1:5432/kuitti",
            "error: invalid settings: KUITTI_READ_DATABASE_URL: needs a PostgreSQL primary "
            "in KUITTI_DATABASE_URL, not SQLite",
        ),
        (
            "sqlite:///{tmp}/kuitti.db",
            "postgresql://kuitti@127.0.0.1:5432/kuitti",
            "error: invalid settings: KUITTI_READ_DATABASE_URL: needs a PostgreSQL primary "
            "in KUITTI_DATABASE_URL, not SQLite",
        ),
        (
            "postgresql://kuitti@127.0.0.1:5432/kuitti",
            "postgresql://kuitti@db2:5432,db3:5432/kuitti?target_session_attr=standby",
            "error: invalid settings: KUITTI_READ_DATABASE_URL: not a PostgreSQL URL libpq "
            'takes: invalid URI query parameter: "target_session_attr"',
        ),
    ],
    ids=["default-sqlite", "sqlite", "misspelt-libpq-parameter"],
)
def test_read_replica_mistakes_are_one_line(
    tmp_path: Path, database_url: str | None, read_url: str, message: str
) -> None:
    """A read replica needs a PostgreSQL primary and a URL libpq takes: one line, exit 2."""
    env = {**os.environ, "KUITTI_VAR_DIR": str(tmp_path), "KUITTI_READ_DATABASE_URL": read_url}
    env.pop("KUITTI_DATABASE_URL", None)
    if database_url is not None:
        env["KUITTI_DATABASE_URL"] = database_url.format(tmp=tmp_path)
    result = subprocess.run(
        [KUITTI, "db", "upgrade"], env=env, cwd=tmp_path, capture_output=True, text=True
    )
    assert result.returncode == 2
    assert result.stderr.startswith(message), result.stderr
    assert result.stderr.count("\n") == 1, result.stderr


def test_version_is_the_package_version() -> None:
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output == f"kuitti {__version__}\n"


def test_a_command_on_a_current_database_does_not_import_alembic(
    services: Services, tmp_path: Path
) -> None:
    """The revision is read and compared with ``HEAD_REVISION``: Alembic (a tenth of a second
    of every command) is imported only when there is a migration to run."""
    code = (
        "import sys; from typer.testing import CliRunner; from kuitti.cli import app; "
        "result = CliRunner().invoke(app, ['partner', 'list']); "
        "assert result.exit_code == 0, result.output; "
        "print(sorted(m for m in sys.modules if m.startswith(('alembic', 'kuitti.migrate'))))"
    )
    env = {**os.environ, "KUITTI_DATABASE_URL": services.settings.database_url or ""}
    env["KUITTI_SECRET_KEY"] = services.settings.secret_key or ""
    env["KUITTI_VAR_DIR"] = str(tmp_path)
    loaded = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env=env
    ).stdout
    assert loaded.strip() == "[]"
