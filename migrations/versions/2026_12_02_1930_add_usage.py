"""add usage

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-02 21:39:10.166340
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0003"
down_revision: str | None = "0002"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "usage_rollups",
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column(
            "rolled_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.PrimaryKeyConstraint("day", name=op.f("pk_usage_rollups")),
    )
    op.create_table(
        "usage_daily",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("day", sa.Date(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("status", sa.String(), nullable=False),
        sa.Column("count", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_usage_daily_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "day", "agent", "status", name=op.f("pk_usage_daily")),
    )


def downgrade() -> None:
    op.drop_table("usage_daily")
    op.drop_table("usage_rollups")
