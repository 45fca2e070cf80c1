"""the pre-authorised amount index holds only pre-authorised payments

``ix_card_payments_preauth`` had an entry for every CARD payment, nearly all of them with no
pre-authorised amount. Those entries sort by merchant id, so each receipt's landed on a page of
its own: on SQLite about one more 4 KB page written per stored receipt, a tenth of its WAL
(bench/HISTORY.md, "Eleventh round"). The only lookup by it compares the amount with a value,
which both databases know implies ``IS NOT NULL``, so the partial index still serves it.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-26 20:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

_COLUMNS = ["merchant_id", "pre_authorized_amount", "pan_last4", "paid_at"]


def upgrade() -> None:
    op.drop_index("ix_card_payments_preauth", table_name="card_payments")
    where = sa.text("pre_authorized_amount IS NOT NULL")
    op.create_index(
        "ix_card_payments_preauth",
        "card_payments",
        _COLUMNS,
        sqlite_where=where,
        postgresql_where=where,
    )


def downgrade() -> None:
    op.drop_index("ix_card_payments_preauth", table_name="card_payments")
    op.create_index("ix_card_payments_preauth", "card_payments", _COLUMNS)
