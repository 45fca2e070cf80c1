"""receipt log: the batches of receipts' signature hashes and the signed tree heads over them

An append-only log in the manner of Certificate Transparency (``kuitti.receipt_log``,
docs/signing.md): every transaction that stores receipts adds one batch (the leaf hashes of
their signatures and the Merkle root over them), each receipt names its batch
(``receipts.log_batch_id``), and the sealer's signed tree heads take the batches no head holds
yet. Receipts signed before this revision are logged by ``kuitti receipts sign-existing``.

Revision ID: 0011
Revises: 0010
Create Date: 2026-11-29 08:30:00
"""

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

import kuitti.db

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "receipt_log_heads",
        sa.Column("seq", sa.Integer(), autoincrement=False, nullable=False),
        sa.Column("created_at", kuitti.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("tree_size", sa.Integer(), nullable=False),
        sa.Column("receipts", sa.Integer(), nullable=False),
        sa.Column("root", sa.LargeBinary(), nullable=False),
        sa.Column("previous", sa.LargeBinary(), nullable=True),
        sa.Column("kid", sa.String(length=100), nullable=False),
        sa.Column("jws", sa.Text(), nullable=False),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_receipt_log_heads")),
    )
    op.create_table(
        "receipt_log_batches",
        sa.Column("id", sa.Uuid(), nullable=False),
        sa.Column("created_at", kuitti.db.UTCDateTime(timezone=True), nullable=False),
        sa.Column("size", sa.Integer(), nullable=False),
        sa.Column("root", sa.LargeBinary(), nullable=False),
        sa.Column("leaves", sa.LargeBinary(), nullable=False),
        sa.Column("head_seq", sa.Integer(), nullable=True),
        sa.Column("head_index", sa.Integer(), nullable=True),
        sa.Column("head_path", sa.LargeBinary(), nullable=True),
        sa.ForeignKeyConstraint(
            ["head_seq"],
            ["receipt_log_heads.seq"],
            name=op.f("fk_receipt_log_batches_head_seq_receipt_log_heads"),
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_receipt_log_batches")),
    )
    op.create_index(
        "ix_receipt_log_batches_unsealed",
        "receipt_log_batches",
        ["id"],
        unique=False,
        postgresql_where=sa.text("head_seq IS NULL"),
        sqlite_where=sa.text("head_seq IS NULL"),
    )
    op.add_column("receipts", sa.Column("log_batch_id", sa.Uuid(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("receipts") as batch:
        batch.drop_column("log_batch_id")
    op.drop_index("ix_receipt_log_batches_unsealed", table_name="receipt_log_batches")
    op.drop_table("receipt_log_batches")
    op.drop_table("receipt_log_heads")
