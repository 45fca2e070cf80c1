"""indexes for the foreign keys that reference receipts, and for the idempotency retention

Deleting a receipt makes the database look for rows that still reference it. Two referencing
columns had no index leading with them, ``receipt_deliveries.receipt_id`` (its primary key leads
with the user) and ``mail_messages.receipt_id``, so each deleted receipt scanned both tables:
37.7 ms a receipt at two million stored, 16.5-20.9 s per sandbox purge batch of 500 (issue 44).
Every other column that references ``receipts`` leads an index already.

``ix_idempotency_records_created`` is the range the worker deletes expired records by
(``KUITTI_IDEMPOTENCY_RETENTION_DAYS``, ``kuitti.housekeeping``).

Building them reads each table once and holds off writes to it meanwhile: some seconds at
millions of rows.

Revision ID: 0005
Revises: 0004
Create Date: 2026-11-29 03:00:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index("ix_receipt_deliveries_receipt", "receipt_deliveries", ["receipt_id"])
    op.create_index("ix_mail_messages_receipt_id", "mail_messages", ["receipt_id"])
    op.create_index("ix_idempotency_records_created", "idempotency_records", ["created_at"])


def downgrade() -> None:
    op.drop_index("ix_idempotency_records_created", table_name="idempotency_records")
    op.drop_index("ix_mail_messages_receipt_id", table_name="mail_messages")
    op.drop_index("ix_receipt_deliveries_receipt", table_name="receipt_deliveries")
