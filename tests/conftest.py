"""Shared fixtures: a real migrated database (SQLite or PostgreSQL), a real server on loopback.

The backend is chosen by ``KUITTI_TEST_DATABASE`` (``sqlite``, the default, or ``postgresql``);
``scripts/test`` runs the suite once on each. PostgreSQL tests get a database of their own,
created from ``KUITTI_TEST_POSTGRES_URL`` and dropped at the end, so parallel runs never meet.

One server per test session runs the real app under uvicorn in a thread; tests talk to it over
HTTP with httpx. Each test starts from empty tables and a frozen clock at ``CLOCK_START``.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import socket
import sys
import threading
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import httpx
import psycopg
import pytest
import uvicorn
from playwright.sync_api import Browser
from sqlalchemy import event, text

from kuitti.app import create_app
from kuitti.clock import FrozenClock
from kuitti.config import Settings
from kuitti.db import Base, Database
from kuitti.dbmigrate import upgrade
from kuitti.services import Services
from tests.browser import CHROMIUM, launch_chromium

BACKEND = os.environ.get("KUITTI_TEST_DATABASE", "sqlite")
# Every `kuitti worker` a test starts takes any free port for /metrics, never the fixed default.
os.environ.setdefault("KUITTI_WORKER_PORT", "0")
PG_ADMIN_URL = os.environ.get(
    "KUITTI_TEST_POSTGRES_URL", "postgresql://kuitti:kuitti@127.0.0.1:5432/postgres"
)
CLOCK_START = datetime(2026, 1, 15, 12, 0, tzinfo=UTC)
# Every answer the suite sees is checked against /openapi.json at the end of the session.
pytest_plugins = ["tests.openapi_truth"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The markers that say where a test can run (``pyproject.toml``) skip it elsewhere."""
    skips = {
        "browser": (not CHROMIUM.exists(), "needs Debian's chromium"),
        "postgres_only": (BACKEND != "postgresql", "runs on PostgreSQL only"),
        "sqlite_only": (BACKEND != "sqlite", "runs on SQLite only"),
    }
    for item in items:
        for marker, (skip, reason) in skips.items():
            if skip and item.get_closest_marker(marker) is not None:
                item.add_marker(pytest.mark.skip(reason=reason))


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@pytest.fixture(scope="session")
def database_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    if BACKEND == "sqlite":
        yield f"sqlite:///{tmp_path_factory.mktemp('db') / 'kuitti.db'}"
        return
    if BACKEND != "postgresql":
        raise pytest.UsageError("KUITTI_TEST_DATABASE must be sqlite or postgresql")
    name = f"kuitti_test_{secrets.token_hex(4)}"
    with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    base, _, _ = PG_ADMIN_URL.rpartition("/")
    try:
        yield f"{base}/{name}"
    finally:
        with psycopg.connect(PG_ADMIN_URL, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def make_settings(
    database_url: str, var_dir: Path, public_url: str, **overrides: object
) -> Settings:
    values: dict[str, object] = {
        "database_url": database_url,
        "var_dir": var_dir,
        "public_url": public_url,
        "secret_key": "test-secret-key-not-for-production",
        "webhook_allow_insecure": True,
        "log_level": "WARNING",
    }
    values.update(overrides)
    return Settings(**values)  # type: ignore[arg-type]


@pytest.fixture(scope="session")
def clock() -> FrozenClock:
    return FrozenClock(CLOCK_START)


@pytest.fixture(scope="session")
def server_port() -> int:
    return free_port()


@pytest.fixture(scope="session")
def session_services(
    database_url: str,
    tmp_path_factory: pytest.TempPathFactory,
    clock: FrozenClock,
    server_port: int,
) -> Iterator[Services]:
    url = database_url.replace("postgresql://", "postgresql+psycopg://", 1)
    db = Database(url, pool_size=10)
    upgrade(db)
    settings = make_settings(
        database_url, tmp_path_factory.mktemp("var"), f"http://127.0.0.1:{server_port}"
    )
    yield Services(settings=settings, db=db, clock=clock)
    db.dispose()


class LiveServer:
    """The real app under uvicorn in a background thread."""

    def __init__(self, services: Services, port: int) -> None:
        app = create_app(services.settings, db=services.db, clock=services.clock)
        config = uvicorn.Config(
            app, host="127.0.0.1", port=port, log_level="warning", proxy_headers=False
        )
        self.server = uvicorn.Server(config)
        self.url = f"http://127.0.0.1:{port}"
        self.thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> LiveServer:
        self.thread.start()
        started = threading.Event()
        # uvicorn sets .started once it listens; wait on it without sleeping blindly.
        for _ in range(500):
            if self.server.started:
                started.set()
                break
            started.wait(0.01)
        assert started.is_set(), "the test server did not start"
        return self

    def __exit__(self, *_exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)


@pytest.fixture(scope="session")
def live_server(session_services: Services, server_port: int) -> Iterator[LiveServer]:
    with LiveServer(session_services, server_port) as server:
        yield server


def empty_tables(db: Database) -> None:
    tables = [t.name for t in reversed(Base.metadata.sorted_tables)]
    with db.engine.begin() as connection:
        if db.dialect == "postgresql":
            connection.execute(text(f"TRUNCATE {', '.join(tables)} RESTART IDENTITY CASCADE"))
        else:
            for table in tables:
                connection.execute(text(f"DELETE FROM {table}"))  # noqa: S608


@pytest.fixture
def services(session_services: Services, clock: FrozenClock) -> Iterator[Services]:
    """The services behind the live server, on empty tables and a reset clock."""
    clock.set(CLOCK_START)
    yield session_services
    empty_tables(session_services.db)


class StatementCounter:
    """The SQL statements sent on the test database's engine while ``counting()`` is open.

    The live server runs in a thread of this process on the same ``Database``, so its requests'
    statements are counted too: count around an HTTP call to see what the call costs. The
    statements ``Database.read_rows`` and ``read_rows_async`` run on the driver are counted as
    well (the real method still runs)."""

    def __init__(self, db: Database) -> None:
        self.db = db

    @contextlib.contextmanager
    def counting(self) -> Iterator[list[str]]:
        statements: list[str] = []

        def count(_conn: object, _cursor: object, statement: str, *_args: object) -> None:
            statements.append(statement)

        direct_query = self.db._direct_query  # what every driver read runs

        def counted(statement: Any) -> Any:
            statements.append(str(statement))
            return direct_query(statement)

        event.listen(self.db.engine, "before_cursor_execute", count)
        self.db._direct_query = counted  # type: ignore[method-assign]
        try:
            yield statements
        finally:
            event.remove(self.db.engine, "before_cursor_execute", count)
            del self.db._direct_query


@pytest.fixture
def sql(services: Services) -> StatementCounter:
    """Counts statements: ``with sql.counting() as statements: ...`` (N+1 queries show up as
    a count that grows with the number of rows)."""
    return StatementCounter(services.db)


@pytest.fixture
def client(live_server: LiveServer, services: Services) -> Iterator[httpx.Client]:
    # Every test starts at the same frozen minute: link-page misses of earlier tests would
    # otherwise add up to the shared server's per-client miss limit.
    app: Any = live_server.server.config.app
    app.state.services.link_misses.clear()
    with httpx.Client(base_url=live_server.url, timeout=30) as http:
        yield http


@pytest.fixture
def serve(tmp_path: Path) -> tuple[str, dict[str, str], list[str]]:
    """Yields (base URL, environment, extra serve args); the test starts the process."""
    port = free_port()
    env = {
        **os.environ,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}",
        "KUITTI_PUBLIC_URL": f"http://127.0.0.1:{port}",
        "KUITTI_LOG_LEVEL": "WARNING",
        "KUITTI_VAR_DIR": str(tmp_path / "var"),  # not the checkout's own var/
    }
    env.pop("KUITTI_DATABASE_URL", None)
    return f"http://127.0.0.1:{port}", env, ["--port", str(port)]


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    """Headless chromium (``tests/browser.py``), one per test module."""
    with launch_chromium() as chromium:
        yield chromium
