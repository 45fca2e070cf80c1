"""FastAPI dependencies shared by every domain: the running services, sessions and the clock.

``Services`` itself lives in ``kuitti/services.py``; domain code imports it from there.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy.orm import Session

from kuitti.errors import PayloadTooLarge
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
    """The request body, refused with 413 as soon as it grows past the limit."""
    services = get_services(request)
    limit = services.settings.max_body_bytes
    chunks = bytearray()
    async for chunk in request.stream():
        chunks += chunk
        if len(chunks) > limit:
            raise PayloadTooLarge(f"The body is larger than the limit of {limit} bytes.")
    return bytes(chunks)


ServicesDep = Annotated[Services, Depends(_services)]
# scope="function": the unit of work commits before the response is sent, never after.
WriteSession = Annotated[Session, Depends(_write_session, scope="function")]
ReadSession = Annotated[Session, Depends(_read_session, scope="function")]
Now = Annotated[datetime, Depends(_now)]
RawBody = Annotated[bytes, Depends(_raw_body)]
