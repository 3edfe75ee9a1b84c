"""add code versions: the agent's code version on each run and on each recorded step (issue 43)

`runs.code_version` is set by a run's first claim (`Run.codeVersion`); `run_steps.code_version`
by the statement that records the step. Both NULL for what was recorded before.

Revision ID: 0043
Revises: 0031
Create Date: 2026-12-06 12:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0043"
down_revision: str | None = "0031"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column("runs", sa.Column("code_version", sa.String(), nullable=True))
    op.add_column("run_steps", sa.Column("code_version", sa.String(), nullable=True))


def downgrade() -> None:
    op.drop_column("run_steps", "code_version")
    op.drop_column("runs", "code_version")
