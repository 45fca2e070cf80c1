"""Waking the card-matching worker when a receipt's CARD payments are committed.

The ingest transaction only records a receipt's payments (queued); the worker decides them
after the commit, woken on this channel (``kuitti.wakeups``: a callback in this process,
``NOTIFY kuitti_card_matching`` on PostgreSQL for the others). On SQLite across processes, the
worker's periodic sweep finds them.
"""

from __future__ import annotations

from kuitti.wakeups import CommitWakeup

MATCHING = CommitWakeup("kuitti_card_matching")
