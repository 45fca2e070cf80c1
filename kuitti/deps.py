"""FastAPI dependencies shared by every domain: the running services, sessions and the clock."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from kuitti.clock import Clock
from kuitti.config import Settings
from kuitti.db import Database


@dataclass(frozen=True)
class Services:
    """What a request handler may use; built once in ``create_app``."""

    settings: Settings
    db: Database
    clock: Clock


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


ServicesDep = Annotated[Services, Depends(_services)]
# scope="function": the unit of work commits before the response is sent, never after.
WriteSession = Annotated[Session, Depends(_write_session, scope="function")]
ReadSession = Annotated[Session, Depends(_read_session, scope="function")]
Now = Annotated[datetime, Depends(_now)]
RawBody = Annotated[bytes, Depends(_raw_body)]
