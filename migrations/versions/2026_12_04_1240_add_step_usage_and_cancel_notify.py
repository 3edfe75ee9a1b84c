"""add step usage, the cancel notification and tenants' llm rate

`run_steps` gains the model usage a step recorded (`ctx.record_usage`, or a result carrying
`usage`): requests, input and output tokens, the model and its cost in USD (NULL when the model
is not in the price table), journaled with the step so that it is counted once, whatever the
attempt. A step copied from another run (`retryRun(reuseSteps: true)`) carries none: its usage
stays with the run that paid for it.

`tenants.llm_rate` is a tenant's own rate of the `llm` named limit ("N/S"; NULL: a share of
the global `OUTLIVE_LIMIT_LLM`).

A trigger NOTIFYs `outlive_cancel` (the run's id) when a cancel is requested of a RUNNING run, so
the worker executing it interrupts the step it awaits within a second, without polling the row.

Revision ID: 0017
Revises: 0013
Create Date: 2026-12-04 12:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0017"
down_revision: str | None = "0013"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

CANCEL_NOTIFY = """
CREATE OR REPLACE FUNCTION outlive_cancel_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outlive_cancel', NEW.id::text);
    RETURN NULL;
END $$;
"""


def upgrade() -> None:
    op.add_column(
        "run_steps", sa.Column("requests", sa.Integer(), server_default="0", nullable=False)
    )
    op.add_column(
        "run_steps", sa.Column("input_tokens", sa.BigInteger(), server_default="0", nullable=False)
    )
    op.add_column(
        "run_steps",
        sa.Column("output_tokens", sa.BigInteger(), server_default="0", nullable=False),
    )
    op.add_column("run_steps", sa.Column("model", sa.String(), nullable=True))
    op.add_column("run_steps", sa.Column("cost_usd", sa.Numeric(), nullable=True))
    op.add_column("tenants", sa.Column("llm_rate", sa.String(), nullable=True))
    op.execute(CANCEL_NOTIFY)
    op.execute(
        "CREATE TRIGGER runs_cancel_requested AFTER UPDATE OF cancel_requested_at ON runs"
        " FOR EACH ROW WHEN (OLD.cancel_requested_at IS NULL"
        " AND NEW.cancel_requested_at IS NOT NULL AND NEW.status = 'RUNNING')"
        " EXECUTE FUNCTION outlive_cancel_notify()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER runs_cancel_requested ON runs")
    op.execute("DROP FUNCTION outlive_cancel_notify()")
    op.drop_column("tenants", "llm_rate")
    for name in ("cost_usd", "model", "output_tokens", "input_tokens", "requests"):
        op.drop_column("run_steps", name)
