"""The deferred re-check: payments whose auth window has closed are decided, and what left the
matching set expires. Run by the worker's loop (``run_settler``) and by ``kuitti card settle``;
each arrival also settles its own merchant id's due payments."""

from __future__ import annotations

import asyncio
import contextlib

from sqlalchemy import select

from kuitti import locks
from kuitti.cards.matching import SETTLE_BATCH, Matcher, expire_unmatched
from kuitti.logs import log
from kuitti.metrics import CARD_MATCHING_SECONDS
from kuitti.models.cards import CardPaymentRecord
from kuitti.services import Services

SETTLE_INTERVAL_SECONDS = 30.0


def settle_due_matches(services: Services, *, limit: int = SETTLE_BATCH) -> int:
    """Decide payments whose auth window has closed, one merchant id per unit of work (under its
    lock), then expire what left the matching set. Returns how many payments were decided or
    expired (call again while it returns nonzero to drain a backlog)."""
    now = services.clock.now()
    with services.db.session(write=False) as session:
        rows = session.scalars(
            select(CardPaymentRecord.merchant_id)
            .where(
                CardPaymentRecord.settle_at.is_not(None),
                CardPaymentRecord.settle_at <= now,
            )
            .order_by(CardPaymentRecord.settle_at)
            .limit(limit)
        ).all()
    merchant_ids = list(dict.fromkeys(m for m in rows if m is not None))
    total = 0
    for merchant_id in merchant_ids:
        with services.db.session() as session, CARD_MATCHING_SECONDS.labels("settle").time():
            locks.acquire(session, "match", merchant_id)
            total += Matcher(session, services.settings, now).settle_due(merchant_id)
    with services.db.session() as session:
        total += expire_unmatched(session, now, limit=limit)
    return total


async def run_settler(services: Services, stop: asyncio.Event) -> None:
    """Run ``settle_due_matches`` every ``SETTLE_INTERVAL_SECONDS`` until ``stop`` is set (for the
    worker's task group)."""
    while not stop.is_set():
        try:
            await asyncio.to_thread(settle_due_matches, services)
        except Exception as exc:  # a database outage must not end the loop; retry next round
            log.warning("settle_due_matches failed", error=type(exc).__name__)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), SETTLE_INTERVAL_SECONDS)
