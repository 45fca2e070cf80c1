"""receipt documents compressed with LZ4 on PostgreSQL

PostgreSQL compresses a document over about 2 KB out of line (TOAST), with pglz unless told
otherwise. With LZ4 the server spends 0.18 ms of CPU per stored 60-row receipt instead of 0.34 ms
(bench/HISTORY.md, "Eighth round"), and reads decompress faster, for a table
about 30 % larger. Rows stored before keep pglz: both read alike. A server built without LZ4
(every common build since PostgreSQL 14 has it) keeps pglz. SQLite stores text as it is.

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-26 13:30:00
"""

from collections.abc import Sequence

from alembic import op

revision: str = "0002"
down_revision: str | None = "0001"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    if op.get_context().dialect.name != "postgresql":
        return
    op.execute(
        """
        DO $$
        BEGIN
            IF 'lz4' = ANY (
                SELECT unnest(enumvals) FROM pg_settings WHERE name = 'default_toast_compression'
            ) THEN
                ALTER TABLE receipts ALTER COLUMN document SET COMPRESSION lz4;
            END IF;
        END $$
        """
    )


def downgrade() -> None:
    if op.get_context().dialect.name == "postgresql":
        op.execute("ALTER TABLE receipts ALTER COLUMN document SET COMPRESSION default")
