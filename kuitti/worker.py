"""The worker: every background step of kuitti, run by ``kuitti worker`` or inside ``kuitti
serve``. It imports the domains; no domain imports it.

Each step is a coroutine that runs until ``stop`` is set. A commit that queued work wakes the
steps that wait on it at once (``kuitti.wakeups``: in this process through a callback, from
other processes through PostgreSQL ``LISTEN``). Adding a step is one line in ``run_worker``.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
import time
from collections.abc import Coroutine
from typing import Any

import uvloop

from kuitti.cards.settler import run_settler
from kuitti.delivery.mail import send_due_mail
from kuitti.housekeeping import run_housekeeping
from kuitti.logs import configure_logging, log
from kuitti.receipts.log import seal_now
from kuitti.receipts.sandbox import purge_sandbox_receipts
from kuitti.services import Services
from kuitti.webhooks.events import WEBHOOKS
from kuitti.webhooks.worker import POLL_SECONDS, WallTime, run_webhooks
from kuitti.worker_http import serve_monitoring

MAIL_POLL_SECONDS = 1.0
SANDBOX_PURGE_SECONDS = 3600.0


def run_worker_process(
    services: Services,
    *,
    use_uvloop: bool = True,
    monitoring: socket.socket | None = None,
    listening: str | None = None,
) -> None:
    """``kuitti worker``: log as configured, answer ``/healthz`` and ``/metrics`` on the bound
    ``monitoring`` socket (``listening`` is its address), log a start line, run until SIGINT
    or SIGTERM.

    On uvloop, as ``kuitti serve`` runs through uvicorn: less CPU per delivery."""
    configure_logging(services.settings.log_level, json=services.settings.log_json)

    async def main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        server = await serve_monitoring(monitoring) if monitoring is not None else None
        log.info(
            "kuitti worker is running",
            listening=listening or "nowhere (no /metrics)",
            database=services.db.label,
        )
        try:
            with services.db.checkpointing():
                await run_worker(services, stop)
        finally:
            if server is not None:
                server.close()

    if use_uvloop:
        uvloop.run(main())
    else:
        asyncio.run(main())


async def run_worker(
    services: Services,
    stop: asyncio.Event,
    *,
    mail: bool = True,
    settle: bool = True,
    wall_time: WallTime = time.time,
    poll_seconds: float = POLL_SECONDS,
) -> None:
    """Run until ``stop`` is set: webhooks, e-mail, the card-linking re-check, the sandbox
    clean-up, the receipt log's tree heads and the housekeeping (``kuitti.housekeeping``) side
    by side.

    ``poll_seconds`` bounds how long a retry that fell due, or an event queued by another
    process without PostgreSQL's NOTIFY (SQLite), waits to be noticed."""
    # Beside the webhook step, which the worker waits for (it lets calls under way finish).
    steps: list[Coroutine[Any, Any, None]] = []
    if mail:
        steps.append(run_mail(services, stop))
    if settle:
        steps.append(run_settler(services, stop))
    steps.append(run_sandbox_purge(services, stop))
    steps.append(run_log_sealer(services, stop))
    steps.append(run_housekeeping(services, stop))
    helpers = [asyncio.create_task(step) for step in steps]
    try:
        async with WEBHOOKS.watching(services.db) as wake:
            await run_webhooks(services, stop, wake, wall_time=wall_time, poll_seconds=poll_seconds)
    finally:
        for task in helpers:
            task.cancel()
        await asyncio.gather(*helpers, return_exceptions=True)


async def run_mail(services: Services, stop: asyncio.Event) -> None:
    """Send due e-mail (``send_due_mail``, in a thread: smtplib blocks) every
    ``MAIL_POLL_SECONDS`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            await asyncio.to_thread(send_due_mail, services)
        except Exception as exc:  # SMTP or database trouble: the next round retries
            log.warning("mail worker round failed", error=f"{type(exc).__name__}: {exc}"[:300])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), MAIL_POLL_SECONDS)


async def run_sandbox_purge(services: Services, stop: asyncio.Event) -> None:
    """Delete sandbox receipts past ``KUITTI_SANDBOX_RETENTION_DAYS`` at start and then every
    ``SANDBOX_PURGE_SECONDS`` until ``stop`` is set."""
    while not stop.is_set():
        try:
            deleted = await asyncio.to_thread(purge_sandbox_receipts, services)
            if deleted:
                log.info("sandbox receipts deleted", count=deleted)
        except Exception as exc:  # database trouble: the next round retries
            log.warning("sandbox purge failed", error=f"{type(exc).__name__}: {exc}"[:300])
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SANDBOX_PURGE_SECONDS)


async def run_log_sealer(services: Services, stop: asyncio.Event) -> None:
    """Sign a tree head over the receipt log's new batches (``kuitti.receipts.log.seal``)
    every ``KUITTI_RECEIPT_LOG_SEAL_SECONDS`` until ``stop`` is set."""
    while not stop.is_set():
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), services.settings.receipt_log_seal_seconds)
        try:
            now = services.clock.now()
            head = await asyncio.to_thread(seal_now, services.db, services.settings, now=now)
            if head is not None:
                log.info("receipt log sealed", seq=head["seq"], batches=head["tree_size"])
        except Exception as exc:  # database trouble: the next round seals what this one did not
            log.warning("receipt log seal failed", error=f"{type(exc).__name__}: {exc}"[:300])
