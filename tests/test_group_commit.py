"""``GroupCommit``: waiting write units commit together, each rolls back alone, and a caller
hears only after the commit. Real database, real writer thread; the batch is formed by holding
the writer inside a first unit until the others are queued (events, not sleeps)."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator

import pytest
from sqlalchemy import select
from sqlalchemy.orm import Session

from kuitti.db import GroupCommit
from kuitti.errors import Conflict
from kuitti.models import IdempotencyRecord
from kuitti.services import Services
from tests.factories import make_partner

Work = Callable[[Session], int]


@pytest.fixture
def group(services: Services) -> Iterator[GroupCommit]:
    writer = GroupCommit(services.db)
    yield writer
    writer.stop()


class Units:
    """Units that each store one row (an idempotency record, keyed by name) and note which
    transaction they ran in."""

    def __init__(self, services: Services) -> None:
        self.services = services
        self.partner_id = make_partner(services).partner.id
        self.ran_in: dict[str, int] = {}
        self.started = threading.Event()  # a held unit is running in the writer

    def store(self, key: str, *, fail: bool = False, hold: threading.Event | None = None) -> Work:
        def work(session: Session) -> int:
            self.ran_in[key] = id(session.get_transaction())
            session.add(
                IdempotencyRecord(
                    partner_id=self.partner_id,
                    key=key,
                    request_hash="h",
                    status_code=200,
                    response_body="{}",
                    created_at=self.services.clock.now(),
                )
            )
            session.flush()
            if hold is not None:
                self.started.set()
                hold.wait()
            if fail:
                raise Conflict("refused", code="refused")
            return len(key)

        return work

    def stored(self) -> set[str]:
        with self.services.db.session(write=False) as session:
            return set(session.scalars(select(IdempotencyRecord.key)))


def test_waiting_units_commit_together_and_fail_alone(
    services: Services, group: GroupCommit
) -> None:
    units = Units(services)
    release = threading.Event()

    async def scenario() -> list[int | BaseException]:
        first = asyncio.ensure_future(group.run(units.store("first", hold=release)))
        await asyncio.get_running_loop().run_in_executor(None, units.started.wait)
        queued = [
            asyncio.ensure_future(group.run(units.store("bad", fail=True))),
            asyncio.ensure_future(group.run(units.store("good"))),
        ]
        await asyncio.sleep(0)  # let the two reach the queue while the writer is held
        assert not first.done()
        release.set()
        return await asyncio.gather(first, *queued, return_exceptions=True)

    first, bad, good = asyncio.run(scenario())
    assert first == len("first")
    assert isinstance(bad, Conflict)
    assert good == len("good")
    # "bad" and "good" ran in one transaction, after the held one; only "bad" rolled back.
    assert units.ran_in["bad"] == units.ran_in["good"] != units.ran_in["first"]
    assert units.stored() == {"first", "good"}


def test_a_database_error_reruns_the_batch_one_by_one(
    services: Services, group: GroupCommit
) -> None:
    """A unit that breaks on the database (here a duplicate primary key) must not take the
    others down with it: they are committed one transaction each."""
    units = Units(services)
    release = threading.Event()

    async def scenario() -> list[int | BaseException]:
        first = asyncio.ensure_future(group.run(units.store("held", hold=release)))
        await asyncio.get_running_loop().run_in_executor(None, units.started.wait)
        queued = [
            asyncio.ensure_future(group.run(units.store("one"))),
            asyncio.ensure_future(group.run(units.store("one"))),
            asyncio.ensure_future(group.run(units.store("two"))),
        ]
        await asyncio.sleep(0)
        release.set()
        return await asyncio.gather(first, *queued, return_exceptions=True)

    held, one, again, two = asyncio.run(scenario())
    assert (held, one, two) == (len("held"), len("one"), len("two"))
    assert isinstance(again, Exception)
    assert units.stored() == {"held", "one", "two"}


def test_nothing_answers_before_commit(services: Services, group: GroupCommit) -> None:
    units = Units(services)

    async def scenario() -> int:
        return await group.run(units.store("seen"))

    assert asyncio.run(scenario()) == len("seen")
    # A fresh session (another connection) sees the row the moment the caller has its answer.
    assert units.stored() == {"seen"}
