"""new CARD payments wait for the matching worker in a queue of their own

A new payment used to be made due at once (``settle_at`` = now), which put an entry in both
partial indexes of the auth-window re-check; the one by merchant id landed on a page of its own
for nearly every receipt. The receipt's transaction now appends one row to
``card_matching_queue`` instead, and the worker deletes it in the transaction that decides the
payment (bench/HISTORY.md, "Sixteenth round").

Payments recorded before this revision keep their ``settle_at`` and are decided by the re-check,
which still takes every payment whose ``settle_at`` has passed: nothing needs moving.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-27 06:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "card_matching_queue",
        sa.Column("payment_id", sa.Uuid(), nullable=False),
        sa.Column("merchant_id", sa.String(length=200), nullable=False),
        sa.PrimaryKeyConstraint("payment_id", name=op.f("pk_card_matching_queue")),
        sqlite_with_rowid=False,
    )


def downgrade() -> None:
    # What is still queued becomes due at once, as new payments were before this revision.
    op.execute(
        "UPDATE card_payments SET settle_at = updated_at "
        "WHERE id IN (SELECT payment_id FROM card_matching_queue)"
    )
    op.drop_table("card_matching_queue")
