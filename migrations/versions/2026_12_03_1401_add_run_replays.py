"""add run_replays

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-03 13:01:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0007"
down_revision: str | None = "0006"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "run_replays",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("statuses", postgresql.ARRAY(sa.String()), nullable=False),
        sa.Column("agent", sa.String(), nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=True),
        sa.Column("rate", sa.Float(), nullable=False),
        sa.Column("total", sa.Integer(), nullable=False),
        sa.Column("status", sa.String(), server_default="RUNNING", nullable=False),
        sa.Column("started", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("skipped", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("cursor_created_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("cursor_id", sa.Uuid(), nullable=True),
        sa.Column("waiting_for_run_id", sa.Uuid(), nullable=True),
        sa.Column("tick", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column("last_error", sa.String(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("finished_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint(
            "status IN ('RUNNING', 'DONE', 'CANCELLED', 'FAILED')",
            name=op.f("ck_run_replays_status"),
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_run_replays_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_run_replays")),
    )
    op.create_index(
        "ix_run_replays_tenant_newest",
        "run_replays",
        ["tenant_id", sa.literal_column("created_at DESC")],
        unique=False,
    )
    op.create_index(
        "uq_run_replays_one_running_per_tenant",
        "run_replays",
        ["tenant_id"],
        unique=True,
        postgresql_where=sa.text("status = 'RUNNING'"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_run_replays_one_running_per_tenant",
        table_name="run_replays",
        postgresql_where=sa.text("status = 'RUNNING'"),
    )
    op.drop_index("ix_run_replays_tenant_newest", table_name="run_replays")
    op.drop_table("run_replays")
