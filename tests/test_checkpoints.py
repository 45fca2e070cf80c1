"""SQLite's WAL copied into the database file by a thread while a process serves, and by the
committing connection only every ``WAL_AUTOCHECKPOINT_PAGES``.

The live server of the test session runs on ``services.db`` and keeps its thread for the whole
session, so these tests start their own on a second ``Database`` of the same file."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import text

from kuitti.app import create_app
from kuitti.checkpoints import WAL_AUTOCHECKPOINT_PAGES, catch_up
from kuitti.db import Database
from kuitti.dbmigrate import upgrade
from kuitti.services import Services
from tests.conftest import make_settings
from tests.factories import make_partner

THREAD = "kuitti-wal-checkpoints"


def _checkpoint_threads() -> list[threading.Thread]:
    return [thread for thread in threading.enumerate() if thread.name == THREAD]


@pytest.fixture
def own(services: Services) -> Iterator[Services]:
    """``services`` on a ``Database`` of their own, of the same database."""
    db = Database(services.db.url)
    try:
        yield replace(services, db=db)
    finally:
        db.dispose()


def _during_lifespan(app: Any, *, then: Any = None) -> list[threading.Thread]:
    """The checkpoint threads started by the app's lifespan, seen while it runs (then it is
    shut down); ``then(app)`` is called while it runs."""
    before = set(_checkpoint_threads())
    seen: list[threading.Thread] = []

    async def run() -> None:
        messages = asyncio.Queue[dict[str, str]]()
        started = asyncio.Event()

        async def receive() -> dict[str, str]:
            return await messages.get()

        async def send(message: dict[str, str]) -> None:
            assert not message["type"].endswith(".failed"), message
            if message["type"] == "lifespan.startup.complete":
                started.set()

        lifespan = asyncio.create_task(app({"type": "lifespan"}, receive, send))
        await messages.put({"type": "lifespan.startup"})
        await started.wait()
        seen.extend(t for t in _checkpoint_threads() if t not in before)
        if then is not None:
            then(app)
        await messages.put({"type": "lifespan.shutdown"})
        await lifespan

    asyncio.run(run())
    return seen


@pytest.mark.sqlite_only
def test_a_committing_connection_checkpoints_only_as_a_backstop(services: Services) -> None:
    with services.db.session(write=False) as session:
        pages = session.execute(text("PRAGMA wal_autocheckpoint")).scalar()
    assert pages == WAL_AUTOCHECKPOINT_PAGES


@pytest.mark.sqlite_only
def test_catching_up_copies_the_whole_wal(own: Services) -> None:
    # ``own``: a commit through the shared services would wake the live server's checkpoint
    # thread, whose catch-up, if it ran at the same moment as this one, made this one answer -1.
    assert own.db.sqlite_file is not None
    connection = sqlite3.connect(own.db.sqlite_file, isolation_level=None)
    try:
        catch_up(connection)
        make_partner(own)  # a commit: new frames in the WAL
        frames, copied = catch_up(connection)
        assert frames > 0
        assert copied == frames
    finally:
        connection.close()


@pytest.mark.sqlite_only
def test_a_write_wakes_the_thread_which_copies_it(own: Services) -> None:
    db = own.db
    before = set(_checkpoint_threads())
    with db.checkpointing():
        [thread] = [t for t in _checkpoint_threads() if t not in before]
        checkpoints = db.checkpoints
        assert checkpoints is not None
        assert checkpoints.rounds == 0  # nothing written yet, nothing to do
        make_partner(own)
        assert checkpoints.wait_for_rounds(1, timeout=30)
        assert checkpoints.last is not None
        frames, copied = checkpoints.last
        assert frames > 0
        assert copied == frames
    assert db.checkpoints is None
    assert not thread.is_alive()


@pytest.mark.sqlite_only
def test_the_app_checkpoints_in_the_background_while_it_serves(own: Services) -> None:
    app = create_app(own.settings, db=own.db, clock=own.clock)
    [thread] = _during_lifespan(app)
    assert not thread.is_alive()  # stopped with the app
    assert own.db.checkpoints is None


@pytest.mark.postgres_only
def test_no_checkpoint_thread_on_postgresql(own: Services) -> None:
    assert own.db.sqlite_file is None
    with own.db.checkpointing():
        assert own.db.checkpoints is None
    app = create_app(own.settings, db=own.db, clock=own.clock)
    assert _during_lifespan(app) == []


@pytest.mark.sqlite_only
def test_an_app_with_a_database_of_its_own_removes_the_wal_when_it_stops(
    services: Services, tmp_path: Path
) -> None:
    path = tmp_path / "own.db"
    settings = make_settings(f"sqlite:///{path}", tmp_path, "http://kuitti.test")
    migrated = Database(settings.resolved_database_url)
    upgrade(migrated)
    migrated.dispose()
    app = create_app(settings, clock=services.clock)
    wal = Path(f"{path}-wal")

    def write(app: Any) -> None:
        make_partner(app.state.services)
        assert wal.exists()

    _during_lifespan(app, then=write)
    assert not wal.exists()
