"""add durable waits and signals: the WAITING status, the timers, the mailbox

A run parked on a durable sleep or a wait for a signal is WAITING: it holds no worker and no
place under its tenant's cap (the dispatch function counts QUEUED and RUNNING only, unchanged),
but it is still the active run of its (tenant, agent), so the partial unique index now covers
WAITING too. `runs.waiting_for` (the signal's name; NULL for a sleep) and `runs.wake_at` (the
timer, or the signal's timeout) say what it waits for; a partial index on `wake_at` over WAITING
rows makes the relay's look for due timers one index probe when nothing is due. `runs.resumes`
counts the claims that resumed a run from WAITING: new attempts that are not retries.

`run_waits` is the durable record of each sleep and wait, keyed by (run, kind, name, occurrence)
like a step, so a resumed attempt gets past a sleep or wait already satisfied at once.
`run_signals` is each run's mailbox: signals kept until a wait for their name takes them, first
in first out, with an idempotency key accepted once per run.

A trigger wakes the relays (NOTIFY `outlive_relay`) when a run parks, so a relay that sleeps
until its next due timer learns of an earlier one at once.

Revision ID: 0013
Revises: 0012
Create Date: 2026-12-03 21:31:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0013"
down_revision: str | None = "0012"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

OLD_STATUSES = "'QUEUED', 'RUNNING', 'SUCCEEDED', 'FAILED', 'CANCELLED'"
OLD_ACTIVE = "status IN ('QUEUED', 'RUNNING')"
NEW_ACTIVE = "status IN ('QUEUED', 'RUNNING', 'WAITING')"


def _active_index(predicate: str) -> None:
    op.drop_index("uq_runs_one_active_per_agent", table_name="runs")
    op.create_index(
        "uq_runs_one_active_per_agent",
        "runs",
        ["tenant_id", "agent"],
        unique=True,
        postgresql_where=sa.text(predicate),
    )


def _statuses(values: str) -> None:
    op.execute("ALTER TABLE runs DROP CONSTRAINT ck_runs_status")
    op.execute(f"ALTER TABLE runs ADD CONSTRAINT ck_runs_status CHECK (status IN ({values}))")


def upgrade() -> None:
    _statuses(f"{OLD_STATUSES}, 'WAITING'")
    _active_index(NEW_ACTIVE)
    op.add_column("runs", sa.Column("waiting_for", sa.String(), nullable=True))
    op.add_column("runs", sa.Column("wake_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "runs", sa.Column("resumes", sa.Integer(), server_default=sa.text("0"), nullable=False)
    )
    op.create_index(
        "ix_runs_wake", "runs", ["wake_at"], postgresql_where=sa.text("status = 'WAITING'")
    )
    op.execute(
        "CREATE TRIGGER runs_parked AFTER UPDATE OF wake_at ON runs"
        " FOR EACH ROW WHEN (NEW.status = 'WAITING' AND NEW.wake_at IS NOT NULL)"
        " EXECUTE FUNCTION outlive_relay_notify()"
    )
    op.create_table(
        "run_waits",
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("kind", sa.String(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("until", sa.DateTime(timezone=True), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("resolved_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("resolved_by", sa.String(), nullable=True),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_waits_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("run_id", "kind", "name", "occurrence", name=op.f("pk_run_waits")),
    )
    op.create_table(
        "run_signals",
        sa.Column("seq", sa.BigInteger(), sa.Identity(always=True), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("payload", postgresql.JSONB(astext_type=sa.Text()), nullable=True),
        sa.Column("idempotency_key", sa.String(), nullable=True),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column("delivered_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["run_id"], ["runs.id"], name=op.f("fk_run_signals_run_id_runs"), ondelete="CASCADE"
        ),
        sa.PrimaryKeyConstraint("seq", name=op.f("pk_run_signals")),
    )
    op.create_index(
        "uq_run_signals_idempotency_key",
        "run_signals",
        ["run_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "ix_run_signals_pending",
        "run_signals",
        ["run_id", "name", "seq"],
        postgresql_where=sa.text("delivered_at IS NULL"),
    )


def downgrade() -> None:
    op.drop_table("run_signals")
    op.drop_table("run_waits")
    op.execute("DROP TRIGGER runs_parked ON runs")
    op.drop_index("ix_runs_wake", table_name="runs")
    # A WAITING run has no place in the older schema: it settles CANCELLED, saying why.
    op.execute(
        "UPDATE runs SET status = 'CANCELLED', finished_at = now(),"
        " error = 'cancelled by a downgrade: it was WAITING' WHERE status = 'WAITING'"
    )
    op.drop_column("runs", "resumes")
    op.drop_column("runs", "wake_at")
    op.drop_column("runs", "waiting_for")
    _active_index(OLD_ACTIVE)
    _statuses(OLD_STATUSES)
