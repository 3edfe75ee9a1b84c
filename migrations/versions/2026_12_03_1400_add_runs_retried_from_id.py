"""add runs.retried_from_id

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-03 13:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0006"
down_revision: str | None = "0005"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default, no foreign key (retention may prune the original): instant.
    op.add_column("runs", sa.Column("retried_from_id", sa.Uuid(), nullable=True))


def downgrade() -> None:
    op.drop_column("runs", "retried_from_id")
