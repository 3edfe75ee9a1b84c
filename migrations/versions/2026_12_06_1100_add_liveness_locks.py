"""add liveness_locks: a worker's liveness lock is evidence only on the server it was taken on

Advisory locks are not replicated, and a restart, a crash or a failover loses them all: after
Patroni promoted a standby, the relay "handed again 4 run(s) whose worker process is gone" while
that worker was alive and only reconnecting (issue 41). Each worker now records the key it locks
with the start time of the server it locked it on (`outlive.db.liveness`); a free lock means
"gone" only when that record names the server's current life. UNLOGGED: emptied by crash
recovery, never replicated, reset on promotion, so a record is always of this server.

Revision ID: 0031
Revises: 0030
Create Date: 2026-12-06 11:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0031"
down_revision: str | None = "0030"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "liveness_locks",
        sa.Column("worker_id", sa.Integer(), nullable=False),
        sa.Column("server_started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column(
            "taken_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.PrimaryKeyConstraint("worker_id", name=op.f("pk_liveness_locks")),
        prefixes=["UNLOGGED"],
    )


def downgrade() -> None:
    op.drop_table("liveness_locks")
