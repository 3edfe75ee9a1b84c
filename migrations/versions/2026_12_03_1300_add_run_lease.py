"""add run lease: the claim's lease lives in the row

A claim takes a run only when it is QUEUED, or RUNNING with an expired lease; heartbeats extend
`lease_expires_at` and stamp `heartbeat_at`. `lost_attempts` counts the attempts whose worker was
lost (their lease expired), so a run that kills its worker cannot loop forever.

Revision ID: 0004
Revises: 0003
Create Date: 2026-12-03 13:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0004"
down_revision: str | None = "0003"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("lease_expires_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("heartbeat_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "runs",
        sa.Column("lost_attempts", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )


def downgrade() -> None:
    op.drop_column("runs", "lost_attempts")
    op.drop_column("runs", "heartbeat_at")
    op.drop_column("runs", "lease_expires_at")
