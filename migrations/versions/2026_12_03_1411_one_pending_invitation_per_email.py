"""one pending invitation per email

Revision ID: 0010
Revises: 0009
Create Date: 2026-12-03 14:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0010"
down_revision: str | None = "0009"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Duplicates from before the index: the oldest PENDING one per (tenant, email) stays.
    op.execute(
        """UPDATE invitations SET status = 'EXPIRED', updated_at = now()
           WHERE status = 'PENDING' AND id NOT IN (
             SELECT DISTINCT ON (tenant_id, email) id FROM invitations
             WHERE status = 'PENDING' ORDER BY tenant_id, email, created_at, id)"""
    )
    op.create_index(
        "uq_invitations_pending_email",
        "invitations",
        ["tenant_id", "email"],
        unique=True,
        postgresql_where=sa.text("status = 'PENDING'"),
    )


def downgrade() -> None:
    op.drop_index(
        "uq_invitations_pending_email",
        table_name="invitations",
        postgresql_where=sa.text("status = 'PENDING'"),
    )
