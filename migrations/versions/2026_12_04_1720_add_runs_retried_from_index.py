"""add ix_runs_retried_from: the runs that retried a run, newest first

`Run.retriedAsIds` follows `retried_from_id` the other way ("retried as …" on the run page);
without an index that is a scan of every run.

Revision ID: 0023
Revises: 0022
Create Date: 2026-12-04 16:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0023"
down_revision: str | None = "0022"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_index(
        "ix_runs_retried_from",
        "runs",
        ["retried_from_id", sa.text("created_at DESC")],
        postgresql_where=sa.text("retried_from_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_retried_from", table_name="runs")
