"""add the durable-step journal: run_steps, and runs.step_seq

`ctx.step(name, fn)` records each completed step's JSON result here, keyed by (run, name,
occurrence); a later attempt of the run gets it back instead of calling `fn` again. `seq` is the
step's place in the run's completion order, counted by `runs.step_seq` under the run's row lock
(bumped by the same statement that inserts the step), so it is gap-free like `event_seq`.

Revision ID: 0012
Revises: 0011
Create Date: 2026-12-03 21:30:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0012"
down_revision: str | None = "0011"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # A constant default: no table rewrite.
    op.add_column(
        "runs", sa.Column("step_seq", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    op.create_table(
        "run_steps",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
        sa.Column("seq", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("result", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column(
            "completed_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_steps_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "name", "occurrence", name=op.f("pk_run_steps")),
        sa.UniqueConstraint("run_id", "seq", name=op.f("uq_run_steps_run_id_seq")),
    )


def downgrade() -> None:
    op.drop_table("run_steps")
    op.drop_column("runs", "step_seq")
