"""The matching worker's step: decide the CARD payments that are due — receipts just committed
(queued in ``CardMatchingQueue`` by ``matching.record_card_payments``) and weak fits whose auth
window has closed (``settle_at``) — in batches per merchant id, and expire what left the matching
set.

``run_settler`` is the loop the worker runs: woken at once by a commit that recorded payments
(in this process by ``wakeups``, from other processes by PostgreSQL's ``NOTIFY``), and every
``SETTLE_INTERVAL_SECONDS`` regardless. ``kuitti card settle`` runs one step by hand."""

from __future__ import annotations

import asyncio
import time
import uuid

from sqlalchemy import select

from kuitti import locks
from kuitti.cards import wakeups
from kuitti.cards.matching import SETTLE_BATCH, Matcher, expire_unmatched
from kuitti.logs import log
from kuitti.metrics import CARD_MATCHING_SECONDS
from kuitti.models.cards import CardMatchingQueue, CardPaymentRecord
from kuitti.services import Services

SETTLE_INTERVAL_SECONDS = 30.0


def settle_due_matches(
    services: Services, *, limit: int = SETTLE_BATCH, expire: bool = True
) -> int:
    """Decide the due payments, one merchant id per unit of work (under its lock), then (with
    ``expire``) expire what left the matching set. Returns how many payments were decided or
    expired (call again while it returns nonzero to drain a backlog).

    Up to ``limit`` queued payments, oldest first, and the merchant ids of up to ``limit`` due
    re-checks. Two workers may read the same entries: the second finds them gone once it holds
    the merchant id's lock, and decides nothing twice."""
    now = services.clock.now()
    with services.db.session(write=False) as session:
        queued = session.execute(
            select(CardMatchingQueue.merchant_id, CardMatchingQueue.payment_id)
            .order_by(CardMatchingQueue.payment_id)
            .limit(limit)
        ).all()
        rechecks = session.scalars(
            select(CardPaymentRecord.merchant_id)
            .where(
                CardPaymentRecord.settle_at.is_not(None),
                CardPaymentRecord.settle_at <= now,
            )
            .order_by(CardPaymentRecord.settle_at)
            .limit(limit)
        ).all()
    entries: dict[str, list[uuid.UUID]] = {}
    for merchant_id, payment_id in queued:
        entries.setdefault(merchant_id, []).append(payment_id)
    for recheck in rechecks:
        if recheck is not None:
            entries.setdefault(recheck, [])
    total = 0
    for merchant_id, queued_ids in entries.items():
        with services.db.session() as session, CARD_MATCHING_SECONDS.labels("worker").time():
            locks.acquire(session, "match", merchant_id)
            matcher = Matcher(session, services.settings, now)
            total += matcher.settle_due(merchant_id, queued_ids)
    if expire:
        with services.db.session() as session:
            total += expire_unmatched(session, now, limit=limit)
    return total


async def run_settler(services: Services, stop: asyncio.Event) -> None:
    """Run the matching step whenever a commit recorded card payments, and every
    ``SETTLE_INTERVAL_SECONDS``, until ``stop`` is set (for the worker's task group)."""
    async with wakeups.MATCHING.watching(services.db) as wake:
        await _settle_until_stopped(services, stop, wake)


async def _settle_until_stopped(
    services: Services, stop: asyncio.Event, wake: asyncio.Event
) -> None:
    expired_at = 0.0
    while not stop.is_set():
        wake.clear()
        expire = time.monotonic() - expired_at >= SETTLE_INTERVAL_SECONDS
        try:
            while await asyncio.to_thread(settle_due_matches, services, expire=expire):
                expire = False  # drain a backlog; expiry once per interval is enough
        except Exception as exc:  # a database outage must not end the loop; retry later
            log.warning("settle_due_matches failed", error=type(exc).__name__)
        else:
            expired_at = time.monotonic() if expire else expired_at
        waits = [asyncio.create_task(stop.wait()), asyncio.create_task(wake.wait())]
        await asyncio.wait(
            waits, timeout=SETTLE_INTERVAL_SECONDS, return_when=asyncio.FIRST_COMPLETED
        )
        for task in waits:
            task.cancel()
