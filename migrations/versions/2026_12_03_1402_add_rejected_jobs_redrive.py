"""add rejected_jobs redrive columns

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-03 13:02:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0008"
down_revision: str | None = "0007"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "rejected_jobs",
        sa.Column("redrive_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.add_column(
        "rejected_jobs", sa.Column("last_redrive_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column(
        "rejected_jobs", sa.Column("redriven_at", sa.DateTime(timezone=True), nullable=True)
    )
    op.add_column("rejected_jobs", sa.Column("redriven_as", sa.Uuid(), nullable=True))


def downgrade() -> None:
    op.drop_column("rejected_jobs", "redriven_as")
    op.drop_column("rejected_jobs", "redriven_at")
    op.drop_column("rejected_jobs", "last_redrive_at")
    op.drop_column("rejected_jobs", "redrive_attempts")
