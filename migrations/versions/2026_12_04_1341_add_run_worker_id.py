"""add runs.worker_id: which worker process holds a RUNNING run

The claim records the liveness key of the worker process that took the run (`worker_id`); that
process holds a session-level advisory lock on the key for as long as it runs
(`outlive.db.liveness`). A RUNNING run whose worker's lock is free lost its process and may be
claimed again at once, without waiting for its lease; `ix_runs_running` is what the relay
reads to find them. NULL: a claim made without a liveness
connection (the lease alone decides).

Revision ID: 0019
Revises: 0015b
Create Date: 2026-12-04 12:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0019"
down_revision: str | None = "0015b"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("worker_id", sa.Integer(), nullable=True))
    op.create_index(
        "ix_runs_running",
        "runs",
        ["worker_id"],
        postgresql_where=sa.text("status = 'RUNNING'"),
    )


def downgrade() -> None:
    op.drop_index("ix_runs_running", table_name="runs")
    op.drop_column("runs", "worker_id")
