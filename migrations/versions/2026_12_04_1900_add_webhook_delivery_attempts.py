"""add webhook_delivery_attempts: the log of each delivery's attempts

One row per attempt (the delivery's `attempts` count after it): the HTTP status, at most 1 KiB of
the response body, the error in generic words, when it started and how long it took. Written with
the attempt it counts (`services.outbox`); a delivery keeps its newest 20 (`ATTEMPTS_KEPT`), and
the rows go with their delivery (retention, endpoint deletion) or tenant.

Revision ID: 0025
Revises: 0024
Create Date: 2026-12-04 19:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0025"
down_revision: str | None = "0024"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table(
        "webhook_delivery_attempts",
        sa.Column("delivery_id", sa.Uuid(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("response_status", sa.Integer(), nullable=True),
        sa.Column("body_excerpt", sa.String(), nullable=True),
        sa.Column("error", sa.String(), nullable=True),
        sa.Column("started_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("duration_ms", sa.Integer(), nullable=False),
        sa.ForeignKeyConstraint(
            ["delivery_id"],
            ["webhook_deliveries.id"],
            name=op.f("fk_webhook_delivery_attempts_delivery_id_webhook_deliveries"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_webhook_delivery_attempts_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "delivery_id", "attempt", name=op.f("pk_webhook_delivery_attempts")
        ),
    )


def downgrade() -> None:
    op.drop_table("webhook_delivery_attempts")
