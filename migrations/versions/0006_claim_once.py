"""namespace links: claim-once import, shareable links, identifier policies

A namespace link's identifier is chosen by the merchant and may be guessable, so the first
account to import a receipt through it holds it (``receipt_claims``, one row per receipt),
unless the merchant marked the RECEIPT_ID token shareable (``receipt_links.shareable``). A
namespace may require identifiers of a minimum length and alphabet (``namespaces.id_min_length``,
``namespaces.id_alphabet``). Existing links are not shareable and existing namespaces have no
policy; receipts imported before this revision have no claim, and the first import after it
takes one for the account that already holds the receipt.

Revision ID: 0006
Revises: 0004
Create Date: 2026-11-29 03:00:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import kuitti.db

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "receipt_links",
        sa.Column("shareable", sa.Boolean(), server_default=sa.false(), nullable=False),
    )
    op.add_column("namespaces", sa.Column("id_min_length", sa.Integer(), nullable=True))
    op.add_column("namespaces", sa.Column("id_alphabet", sa.String(length=16), nullable=True))
    op.create_table(
        "receipt_claims",
        sa.Column("receipt_id", sa.Uuid(), nullable=False),
        sa.Column("user_id", sa.Uuid(), nullable=False),
        sa.Column("claimed_at", kuitti.db.UTCDateTime(timezone=True), nullable=False),
        sa.ForeignKeyConstraint(
            ["receipt_id"], ["receipts.id"], name=op.f("fk_receipt_claims_receipt_id_receipts")
        ),
        sa.ForeignKeyConstraint(
            ["user_id"], ["users.id"], name=op.f("fk_receipt_claims_user_id_users")
        ),
        sa.PrimaryKeyConstraint("receipt_id", name=op.f("pk_receipt_claims")),
    )
    op.create_index(op.f("ix_receipt_claims_user_id"), "receipt_claims", ["user_id"], unique=False)


def downgrade() -> None:
    op.drop_index(op.f("ix_receipt_claims_user_id"), table_name="receipt_claims")
    op.drop_table("receipt_claims")
    with op.batch_alter_table("namespaces") as batch:
        batch.drop_column("id_alphabet")
        batch.drop_column("id_min_length")
    with op.batch_alter_table("receipt_links") as batch:
        batch.drop_column("shareable")
