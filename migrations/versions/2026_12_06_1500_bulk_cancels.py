"""bulk cancels by filter share run_replays (issue 45 item 7)

`run_replays.kind` (REPLAY, the rows so far, or CANCEL: `cancelRuns`), the filters the runs list
has and replays lacked (`before`, `key`, `tags`, `top_level`), a cancel's `reason` and who asked
(`requested_by`), and its `cancelled` counter. One RUNNING row per tenant and kind: a bulk cancel
may run while a replay does.

Revision ID: 0047
Revises: 0046
Create Date: 2026-12-06 15:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0047"
down_revision: str | None = "0046"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "run_replays", sa.Column("kind", sa.String(), server_default="REPLAY", nullable=False)
    )
    op.add_column("run_replays", sa.Column("before", sa.DateTime(timezone=True), nullable=True))
    op.add_column("run_replays", sa.Column("key", sa.String(), nullable=True))
    op.add_column(
        "run_replays",
        sa.Column(
            "tags", postgresql.ARRAY(sa.String()), server_default=sa.text("'{}'"), nullable=False
        ),
    )
    op.add_column(
        "run_replays",
        sa.Column("top_level", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.add_column("run_replays", sa.Column("reason", sa.String(), nullable=True))
    op.add_column("run_replays", sa.Column("requested_by", sa.String(), nullable=True))
    op.add_column(
        "run_replays",
        sa.Column("cancelled", sa.Integer(), server_default=sa.text("0"), nullable=False),
    )
    op.create_check_constraint(
        op.f("ck_run_replays_kind"), "run_replays", "kind IN ('REPLAY', 'CANCEL')"
    )
    op.drop_index("uq_run_replays_one_running_per_tenant", table_name="run_replays")
    op.create_index(
        "uq_run_replays_one_running_per_kind",
        "run_replays",
        ["tenant_id", "kind"],
        unique=True,
        postgresql_where=sa.text("status = 'RUNNING'"),
    )


def downgrade() -> None:
    op.execute("DELETE FROM run_replays WHERE kind = 'CANCEL'")
    op.drop_index("uq_run_replays_one_running_per_kind", table_name="run_replays")
    op.create_index(
        "uq_run_replays_one_running_per_tenant",
        "run_replays",
        ["tenant_id"],
        unique=True,
        postgresql_where=sa.text("status = 'RUNNING'"),
    )
    op.drop_constraint(op.f("ck_run_replays_kind"), "run_replays", type_="check")
    for column in (
        "cancelled",
        "requested_by",
        "reason",
        "top_level",
        "tags",
        "key",
        "before",
        "kind",
    ):
        op.drop_column("run_replays", column)
