"""The check a new grant makes for an equal one (``kuitti.delivery.service._grant``) is an exact
probe on either index a planner may take for it: by receipt and partner, or the listing index
(partner, receipt time, receipt). With only the partner and the receipt, the listing index read
every grant of the partner, which a planner whose statistics had not yet met the partner chose
at ten million receipts."""

from __future__ import annotations

from typing import Any

from sqlalchemy import event

from kuitti.db import Database
from kuitti.delivery.service import _grant
from kuitti.models import Receipt, ReceiptGrant
from kuitti.models.receipts import GrantReason
from kuitti.services import Services
from tests.factories import store_grants
from tests.plans import explain_sql


def sent_select(db: Database, receipt_id: Any, partner_id: Any) -> tuple[str, Any]:
    """The grants ``SELECT`` that ``_grant`` sends for a grant that exists already."""
    sent: list[tuple[str, Any]] = []

    def catch(_conn: object, _cursor: object, sql: str, values: Any, *_args: object) -> None:
        if "FROM receipt_grants" in sql:
            sent.append((sql, values))

    event.listen(db.engine, "before_cursor_execute", catch)
    try:
        with db.session(write=False) as session:
            receipt = session.get(Receipt, receipt_id)
            assert receipt is not None
            source = ReceiptGrant(reason=GrantReason.POSTED)
            assert not _grant(session, receipt, partner_id, source)
    finally:
        event.remove(db.engine, "before_cursor_execute", catch)
    [statement] = sent
    return statement


def test_the_check_for_an_equal_grant_is_exact_on_the_listing_index(services: Services) -> None:
    [(partner_id, receipt_id), *_] = store_grants(services)
    sql, values = sent_select(services.db, receipt_id, partner_id)
    plan = explain_sql(services.db, sql, values, without="ix_receipt_grants_receipt")
    assert "ix_receipt_grants_listing" in plan, plan
    if services.db.is_sqlite:
        assert "(partner_id=? AND receipt_time=? AND receipt_id=?)" in plan, plan
    else:
        conditions = [line for line in plan.splitlines() if "Index Cond:" in line]
        assert conditions, plan
        assert all("receipt_time = " in line for line in conditions), plan
