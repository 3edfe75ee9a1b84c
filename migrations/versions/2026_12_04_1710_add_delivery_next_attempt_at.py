"""add webhook_deliveries.next_attempt_at: when a failing delivery's next attempt is due

A PENDING delivery whose attempt failed waits for the jobs queue's backoff; the consumer records
when the retry is due (`next_attempt_at`), so the console can say it and offer "Retry now"
(`retryWebhookDelivery`). NULL: not waiting for a retry (never tried, or settled).

Revision ID: 0022
Revises: 0021
Create Date: 2026-12-04 16:10:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0022"
down_revision: str | None = "0021"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.add_column(
        "webhook_deliveries",
        sa.Column("next_attempt_at", sa.DateTime(timezone=True), nullable=True),
    )


def downgrade() -> None:
    op.drop_column("webhook_deliveries", "next_attempt_at")
