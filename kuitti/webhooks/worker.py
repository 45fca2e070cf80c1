"""The delivery worker: sends due webhooks and e-mails from the outbox."""

from __future__ import annotations

import asyncio

from kuitti.deps import Services


async def run_worker(services: Services, stop: asyncio.Event) -> None:
    """Run until ``stop`` is set (built by the webhooks work)."""
    await stop.wait()
