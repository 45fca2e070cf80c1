"""Helpers for webhook tests: drive the worker's step function, build partners and events."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

from sqlalchemy import select

from kuitti.models import Connection, PartnerRole, WebhookDelivery
from kuitti.partners.service import NewPartner
from kuitti.services import Services
from kuitti.webhooks.events import enqueue
from kuitti.webhooks.payloads import ReceiptNotification, WebhookPayload
from kuitti.webhooks.worker import deliver_due, make_client
from kuitti.worker import run_worker
from tests import factories
from tests.factories import make_partner


def with_settings(services: Services, **changes: Any) -> Services:
    """The same database and clock under other settings (e.g. a short timeout)."""
    settings = services.settings.model_copy(update=changes)
    return dataclasses.replace(services, settings=settings)


def deliver(services: Services) -> int:
    """Run the worker's step once: send what is due, record the outcomes."""

    async def main() -> int:
        async with make_client(services.settings) as client:
            return await deliver_due(services, client)

    return asyncio.run(main())


def webhook_partner(
    services: Services, url: str, *roles: PartnerRole, name: str = "Pankkisovellus"
) -> NewPartner:
    return make_partner(services, *(roles or (PartnerRole.APP,)), name=name, webhook_url=url)


def add_connection(
    services: Services,
    user_id: uuid.UUID,
    partner_id: uuid.UUID,
    *,
    scope: str = "receipt:read",
    metadata: dict[str, Any] | None = None,
    revoked: bool = False,
) -> Connection:
    """``factories.add_connection`` in a unit of work of its own."""
    with services.db.session() as session:
        return factories.add_connection(
            session,
            user_id,
            partner_id,
            now=services.clock.now(),
            scope=scope,
            metadata=metadata,
            revoked=revoked,
        )


def a_receipt_notification() -> ReceiptNotification:
    return ReceiptNotification(service_id=uuid.uuid4(), receipt_id=uuid.uuid4())


def queue(
    services: Services, partner: NewPartner, payload: WebhookPayload | None = None
) -> uuid.UUID:
    with services.db.session() as session:
        delivery = enqueue(
            session, partner.partner, payload or a_receipt_notification(), now=services.clock.now()
        )
        assert delivery is not None
        return delivery.id


def delivery(services: Services, delivery_id: uuid.UUID) -> WebhookDelivery:
    with services.db.session(write=False) as session:
        row = session.scalar(select(WebhookDelivery).where(WebhookDelivery.id == delivery_id))
        assert row is not None
        session.expunge(row)
        return row


class WorkerThread:
    """``run_worker`` in its own thread and event loop, as ``kuitti worker`` runs it."""

    def __init__(
        self, services: Services, *, mail: bool = False, poll_seconds: float = 0.05
    ) -> None:
        self.services = services
        self.mail = mail
        self.poll_seconds = poll_seconds
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop: asyncio.Event | None = None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        async def main() -> None:
            self._loop = asyncio.get_running_loop()
            self._stop = asyncio.Event()
            self._ready.set()
            await run_worker(
                self.services,
                self._stop,
                mail=self.mail,
                settle=self.mail,
                poll_seconds=self.poll_seconds,
            )

        try:
            asyncio.run(main())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def __enter__(self) -> WorkerThread:
        self._thread.start()
        assert self._ready.wait(10)
        return self

    def __exit__(self, *_exc: object) -> None:
        if self._loop is not None and self._stop is not None:
            with contextlib.suppress(RuntimeError):
                self._loop.call_soon_threadsafe(self._stop.set)
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the worker did not stop"
        assert self.error is None, f"the worker crashed: {self.error!r}"


def wait_until(condition: Callable[[], bool], timeout_seconds: float = 10.0) -> None:
    """Wait for a condition another thread makes true (checked every 20 ms)."""
    deadline = time.monotonic() + timeout_seconds
    pause = threading.Event()
    while not condition():
        assert time.monotonic() < deadline, "condition not met in time"
        pause.wait(0.02)
