"""FastAPI dependencies shared by every domain: the running services, sessions and the clock.

``Services`` itself lives in ``kuitti/services.py``; domain code imports it from there.

The unit-of-work rule, the same for every route and every auth dependency:

- **Reads go through the request's session**, ``ReadSession``. FastAPI builds a dependency once
  per request, so the auth dependencies (partner key, Bearer token, login cookie) and the route
  share one session, and what auth loaded stays attached for the route to use. The session
  connects lazily: a request that never reads costs no connection.
- **Writes go through one write unit per request**, opened once the input has been checked:
  ``with services.db.session() as session:`` in the route after its checks, or ``WriteSession``
  for a route with nothing left to check once FastAPI has parsed its parameters (it opens
  before the route body runs). The reason is SQLite: it has one writer, and a write unit holds
  that lock (``BEGIN IMMEDIATE`` behind an in-process lock, ``db.py``) from the moment it opens,
  so it should not open while the request may still be refused, nor span work that only reads.
  Rows read through the request's session are fetched again by primary key inside the write
  unit (``session.get``) before they are changed.

Both commit before the response is sent (``scope="function"``), so a client never sees success
for something that then fails to commit.

A dependency that reads (authentication) hands its connection back before it returns
(``release_connection``): FastAPI runs each sync dependency and the route in separate hops to a
small threadpool (``KUITTI_THREADS``), and a request that kept a connection while it waited for
a thread could deadlock against threads that wait for a connection.

The receipt post uses none of these: it is the one route that must run at the speed of the
machine, so it checks on the event loop and writes through the process's group-commit writer
(``kuitti.posting.ingest``), which also commits before anyone is answered. The receipt reads
(``GET /api/v1/receipts/…``) are async too, with no dependencies: the key check and the read
are one prebuilt statement run on the driver from the event loop (``Database.read_rows_async``:
SQLite inline, PostgreSQL on psycopg's async pool), with no thread hop; only a rendering this
process does not have yet opens a session, in a thread (``kuitti.receipts.routes``).
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from kuitti.services import Services


async def _services(request: Request) -> Services:
    # async on purpose: FastAPI runs every sync dependency in the threadpool, and a thread hop
    # costs more than this function.
    return get_services(request)


def get_services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _write_session(services: Annotated[Services, Depends(_services)]) -> Iterator[Session]:
    with services.db.session(write=True) as session:
        yield session


def _read_session(services: Annotated[Services, Depends(_services)]) -> Iterator[Session]:
    with services.db.session(write=False) as session:
        yield session


async def _now(services: Annotated[Services, Depends(_services)]) -> datetime:
    return services.clock.now()


async def _raw_body(request: Request) -> bytes:
    """The request body; the edge middleware has already held it to ``KUITTI_MAX_BODY_BYTES``."""
    return await request.body()


def release_connection(session: Session, *rows: object | None) -> None:
    """Detach ``rows`` (still readable, loaded attributes only) and return the session's
    connection to the pool; the session reconnects if it is used again."""
    for row in rows:
        if row is not None:
            session.expunge(row)
    session.rollback()


ServicesDep = Annotated[Services, Depends(_services)]
# scope="function": the unit of work commits before the response is sent, never after.
WriteSession = Annotated[Session, Depends(_write_session, scope="function")]
ReadSession = Annotated[Session, Depends(_read_session, scope="function")]
Now = Annotated[datetime, Depends(_now)]
RawBody = Annotated[bytes, Depends(_raw_body)]
