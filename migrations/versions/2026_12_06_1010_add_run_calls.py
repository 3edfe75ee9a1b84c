"""model calls made but not recorded: `run_calls`

A model call is billed when the endpoint answers it, whether or not its step is recorded: a
worker killed between the two, a cancel, a timeout or a stream cut off all buy a reply nobody
keeps (round five, F5: 10 requests served, 8 counted). A model step writes a row here before each
call; the statement that records the step deletes it, and a call the endpoint refused (an HTTP
error: not billed) deletes it too. What is left, once its attempt is over, is an abandoned
request (`RunUsage.abandonedRequests`), with the tokens the stream reported when it did.

Revision ID: 0030
Revises: 0029
Create Date: 2026-12-06 10:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0030"
down_revision: str | None = "0029"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_calls",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("step", sa.String(), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
        sa.Column("model", sa.String(), nullable=True),
        sa.Column(
            "started_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("ended_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("reason", sa.String(), nullable=True),
        sa.Column("input_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.Column("output_tokens", sa.BigInteger(), server_default="0", nullable=False),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_calls_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_run_calls")),
    )
    op.create_index("ix_run_calls_step", "run_calls", ["run_id", "step", "occurrence"])


def downgrade() -> None:
    op.drop_index("ix_run_calls_step", table_name="run_calls")
    op.drop_table("run_calls")
