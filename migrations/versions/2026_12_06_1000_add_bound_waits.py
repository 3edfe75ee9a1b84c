"""waits bound to an id of their own, and what a wait shows the person who answers it

A wait may name itself (`ctx.wait_for(..., wait_id=)`): a pydantic-ai tool call that needs an
approval waits as `call-<tool_call_id>`, so the approver's signal names the call it decides.
Such a wait takes only a signal bound to it (`signalRun(waitId:)`), never one kept in the mailbox.
`run_waits.wait_id` records it (unique per run); `runs.wait_id` and `runs.waiting_show` hold it,
and what the agent asked to show (`Run.waitingShow`: the tool and its arguments), while the run
is WAITING on it.

Revision ID: 0029
Revises: 0028
Create Date: 2026-12-06 10:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0029"
down_revision: str | None = "0028"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("wait_id", sa.String(), nullable=True))
    op.add_column(
        "runs", sa.Column("waiting_show", postgresql.JSONB(astext_type=sa.Text()), nullable=True)
    )
    op.add_column("run_waits", sa.Column("wait_id", sa.String(), nullable=True))
    op.create_index(
        "uq_run_waits_wait_id",
        "run_waits",
        ["run_id", "wait_id"],
        unique=True,
        postgresql_where=sa.text("wait_id IS NOT NULL"),
    )


def downgrade() -> None:
    op.drop_index("uq_run_waits_wait_id", table_name="run_waits")
    op.drop_column("run_waits", "wait_id")
    op.drop_column("runs", "waiting_show")
    op.drop_column("runs", "wait_id")
