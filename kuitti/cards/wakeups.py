"""Waking the card-matching worker when a receipt's CARD payments are committed.

The ingest transaction only records a receipt's payments (due at once); the worker decides them
after the commit. In this process the worker is told by a callback on commit; another process's
worker by PostgreSQL's ``NOTIFY kuitti_card_matching``, sent in the same transaction (so only
on commit). On SQLite across processes, the worker's periodic sweep finds them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from sqlalchemy import event, text
from sqlalchemy.orm import Session

MATCH_CHANNEL = "kuitti_card_matching"
_PENDING = "kuitti.cards.pending"
_callbacks: set[Callable[[], None]] = set()
_lock = threading.Lock()


def subscribe(callback: Callable[[], None]) -> Callable[[], None]:
    """Call ``callback`` (from any thread) after each commit that recorded card payments;
    returns the function that unsubscribes."""
    with _lock:
        _callbacks.add(callback)

    def unsubscribe() -> None:
        with _lock:
            _callbacks.discard(callback)

    return unsubscribe


def announce(session: Session) -> None:
    """Mark the session's transaction as one that recorded payments to match."""
    if session.info.get(_PENDING):
        return
    session.info[_PENDING] = True
    if session.get_bind().dialect.name == "postgresql":
        session.execute(text(f"NOTIFY {MATCH_CHANNEL}"))


@event.listens_for(Session, "after_commit")
def _wake_after_commit(session: Session) -> None:
    if session.info.pop(_PENDING, False):
        with _lock:
            callbacks = list(_callbacks)
        for callback in callbacks:
            callback()


@event.listens_for(Session, "after_rollback")
def _forget_after_rollback(session: Session) -> None:
    session.info.pop(_PENDING, None)
