"""receipt signatures: the receipt-signing keys and a signature on every receipt

Receipt-signing keys are apart from the OAuth token keys (``receipt_signing_keys``: the private
key sealed with the server secret; a retired key stays published until ``published_until``).
Every receipt stored from now on carries its signature (``receipts.signature``, a detached JWS);
receipts stored before this revision have none until ``kuitti receipts sign-existing`` signs
them.

Revision ID: 0008
Revises: 0006
Create Date: 2026-11-29 05:40:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import kuitti.db

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "receipt_signing_keys",
        sa.Column("kid", sa.String(length=100), nullable=False),
        sa.Column("algorithm", sa.String(length=10), nullable=False),
        sa.Column("public_jwk", sa.JSON(), nullable=False),
        sa.Column("private_jwk_sealed", sa.String(length=4000), nullable=False),
        sa.Column("created_at", kuitti.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("retired_at", kuitti.db.UTCDateTime(timezone=True), nullable=True),
        sa.Column("published_until", kuitti.db.UTCDateTime(timezone=True), nullable=True),
        sa.PrimaryKeyConstraint("kid", name=op.f("pk_receipt_signing_keys")),
    )
    op.add_column("receipts", sa.Column("signature", sa.Text(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        batch.drop_column("signature")
    op.drop_table("receipt_signing_keys")
