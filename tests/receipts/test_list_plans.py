"""The list's statements read one index range, however deep the page: the plan of each variant
(a partner's key or a user's token, with or without ``since``, after a cursor) as the database
gives it, ``EXPLAIN`` on PostgreSQL and ``EXPLAIN QUERY PLAN`` on SQLite.

A cursor written ``time < t OR (time = t AND id < i)`` left the owner alone as the index
condition, and a page at depth N read and filtered out the N newer rows; these tests fail on it.
The statements are the ones the server sends (``Database._direct_query``), explained on the
test database with the tables empty: on PostgreSQL with sequential scans turned off, so the
test reads which conditions the index takes, not which plan an empty table makes cheapest.
"""

from __future__ import annotations

import re
import uuid
from datetime import UTC, datetime
from typing import Any

import pytest

from kuitti.receipts.readers import _page_query
from kuitti.services import Services
from tests.plans import explain, index_and_partitions

VARIANTS = [(kind, since) for kind in ("key", "user") for since in (False, True)]
LISTING_INDEX = {"key": "ix_receipt_grants_listing", "user": "ix_receipt_deliveries_listing"}


def page_params(kind: str, since: bool) -> dict[str, Any]:
    params: dict[str, Any] = {
        "limit": 51,
        "after_time": datetime(2026, 1, 10, 12, tzinfo=UTC),
        "after_id": uuid.uuid4(),
    }
    if since:
        params["since"] = datetime(2025, 6, 1, tzinfo=UTC)
    if kind == "user":
        params.update(owner=uuid.uuid4(), sandbox=False)
    else:
        params["digest"] = "0" * 64
    return params


def cursor_in_index_condition(plan: str, indexes: list[str], postgresql: bool) -> bool:
    """The plan reads ``indexes`` (an index, or one per partition) with the cursor as the end
    of each range."""
    if postgresql:
        # "Index Only Scan using <index> on ...", then its "Index Cond: (... ROW(...) < ROW(...))"
        scans = re.findall(r"using (\S+) on .*\n\s*Index Cond: (.*)", plan)
        conditions = [condition for name, condition in scans if name in indexes]
        return bool(conditions) and all(
            "ROW(" in condition and ") < ROW(" in condition for condition in conditions
        )
    [index] = indexes
    # "SEARCH receipt_grants USING INDEX <index> (partner_id=? AND (receipt_time,...)<(?,?))"
    searches = re.findall(rf"USING (?:COVERING )?INDEX {index} \((.*)\)", plan)
    return any("(receipt_time,receipt_id)<(?,?)" in condition for condition in searches)


@pytest.mark.parametrize(("kind", "since"), VARIANTS)
def test_a_page_after_a_cursor_is_one_index_range(
    services: Services, kind: str, since: bool
) -> None:
    plan = explain(services.db, _page_query(kind, since, True), page_params(kind, since))
    postgresql = services.db.dialect == "postgresql"
    indexes = index_and_partitions(services.db, LISTING_INDEX[kind])
    assert cursor_in_index_condition(plan, indexes, postgresql), plan
