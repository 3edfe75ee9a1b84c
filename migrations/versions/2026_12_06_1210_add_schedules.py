"""schedules, debounce and priority (issue 44)

`schedules`: a tenant's own cron as data (cron, IANA time zone, input, key and overlap policy,
jitter, catch-up window) with its cursor (`next_occurrence`, `next_fire_at`), fired by the relay.
`runs.schedule_id` / `scheduled_for` (unique together: an occurrence makes at most one run),
`runs.priority` (1..5, a tenant's waiting runs are admitted priority first: `ix_runs_waiting`
now leads with it), `runs.not_before` / `debounce_until` (a debounced run is held back until
then). `outlive_dispatch_runs` admits by priority and skips a run whose notBefore is ahead.

Revision ID: 0044
Revises: 0043
Create Date: 2026-12-06 08:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0044"
down_revision: str | None = "0043"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

WAITING = "status = 'QUEUED' AND dispatched_at IS NULL AND queued_behind_id IS NULL"

# Frozen copy of src/outlive/db/functions/outlive_dispatch_runs.sql at this revision.
DISPATCH_RUNS = """
CREATE OR REPLACE FUNCTION outlive_dispatch_runs(p_tenant uuid, p_default integer)
RETURNS SETOF uuid LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_running_runs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    SELECT count(*) INTO held FROM runs r
     WHERE r.tenant_id = p_tenant AND r.status IN ('QUEUED', 'RUNNING')
       AND r.dispatched_at IS NOT NULL;
    IF held >= cap THEN RETURN; END IF;
    -- The pick runs once (an InitPlan) and the update finds it by primary key and tenant: no
    -- estimate, however stale, plans a scan of other tenants' waiting runs (migration 0026).
    -- Priority first (1 first), then commit order; a debounced run waits for its notBefore,
    -- checked again on the row the update locks (a later start may have moved it on).
    RETURN QUERY
    UPDATE runs u SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
     WHERE u.id = ANY (ARRAY(SELECT w.id FROM runs w
                              WHERE w.tenant_id = p_tenant AND w.status = 'QUEUED'
                                AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                                AND (w.not_before IS NULL OR w.not_before <= now())
                              ORDER BY w.priority, w.created_at, w.id LIMIT cap - held))
       AND u.tenant_id = p_tenant
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL AND u.queued_behind_id IS NULL
       AND (u.not_before IS NULL OR u.not_before <= now())
    RETURNING u.id;
END $$;
"""
OLD_DISPATCH_RUNS = """
CREATE OR REPLACE FUNCTION outlive_dispatch_runs(p_tenant uuid, p_default integer)
RETURNS SETOF uuid LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_running_runs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR NO KEY UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    SELECT count(*) INTO held FROM runs r
     WHERE r.tenant_id = p_tenant AND r.status IN ('QUEUED', 'RUNNING')
       AND r.dispatched_at IS NOT NULL;
    IF held >= cap THEN RETURN; END IF;
    -- The pick runs once (an InitPlan) and the update finds it by primary key and tenant: no
    -- estimate, however stale, plans a scan of other tenants' waiting runs (migration 0026).
    RETURN QUERY
    UPDATE runs u SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
     WHERE u.id = ANY (ARRAY(SELECT w.id FROM runs w
                              WHERE w.tenant_id = p_tenant AND w.status = 'QUEUED'
                                AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                              ORDER BY w.created_at, w.id LIMIT cap - held))
       AND u.tenant_id = p_tenant
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL AND u.queued_behind_id IS NULL
    RETURNING u.id;
END $$;
"""


def upgrade() -> None:
    op.create_table(
        "schedules",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column("cron", sa.String(), nullable=False),
        sa.Column("timezone", sa.String(), nullable=False),
        sa.Column("input", postgresql.JSONB(astext_type=sa.Text()), nullable=False),
        sa.Column("key", sa.String(), nullable=False),
        sa.Column("on_conflict", sa.String(), nullable=False),
        sa.Column(
            "tags", postgresql.ARRAY(sa.String()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("jitter_seconds", sa.Integer(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "catchup_window_seconds", sa.Integer(), server_default=sa.text("300"), nullable=False
        ),
        sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_occurrence", sa.DateTime(timezone=True), nullable=True),
        sa.Column("next_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("last_fire_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("origin", sa.String(), nullable=True),
        sa.Column(
            "created_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.Column(
            "updated_at", sa.DateTime(timezone=True), server_default=sa.func.now(), nullable=False
        ),
        sa.CheckConstraint("jitter_seconds >= 0", name=op.f("ck_schedules_jitter_seconds")),
        sa.CheckConstraint(
            "catchup_window_seconds >= 0", name=op.f("ck_schedules_catchup_window_seconds")
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_schedules_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_schedules")),
    )
    op.create_index(
        "ix_schedules_due",
        "schedules",
        ["next_fire_at"],
        postgresql_where=sa.text("next_fire_at IS NOT NULL"),
    )
    op.create_index("ix_schedules_tenant", "schedules", ["tenant_id", "created_at", "id"])
    op.create_index(
        "uq_schedules_origin",
        "schedules",
        ["tenant_id", "origin"],
        unique=True,
        postgresql_where=sa.text("origin IS NOT NULL"),
    )
    op.add_column("runs", sa.Column("schedule_id", sa.Uuid(), nullable=True))
    op.add_column("runs", sa.Column("scheduled_for", sa.DateTime(timezone=True), nullable=True))
    op.add_column(
        "runs",
        sa.Column("priority", sa.SmallInteger(), server_default=sa.text("3"), nullable=False),
    )
    op.add_column("runs", sa.Column("not_before", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("debounce_until", sa.DateTime(timezone=True), nullable=True))
    op.create_index(
        "uq_runs_schedule_occurrence",
        "runs",
        ["schedule_id", "scheduled_for"],
        unique=True,
        postgresql_where=sa.text("schedule_id IS NOT NULL"),
    )
    op.create_index(
        "ix_runs_not_before",
        "runs",
        ["not_before"],
        postgresql_where=sa.text(f"{WAITING} AND not_before IS NOT NULL"),
    )
    op.drop_index("ix_runs_waiting", table_name="runs")
    op.create_index(
        "ix_runs_waiting",
        "runs",
        ["tenant_id", "priority", "created_at", "id"],
        postgresql_where=sa.text(WAITING),
    )
    op.execute(DISPATCH_RUNS)


def downgrade() -> None:
    op.execute(OLD_DISPATCH_RUNS)
    op.drop_index("ix_runs_waiting", table_name="runs")
    op.create_index(
        "ix_runs_waiting",
        "runs",
        ["tenant_id", "created_at", "id"],
        postgresql_where=sa.text(WAITING),
    )
    op.drop_index("ix_runs_not_before", table_name="runs")
    op.drop_index("uq_runs_schedule_occurrence", table_name="runs")
    for column in ("debounce_until", "not_before", "priority", "scheduled_for", "schedule_id"):
        op.drop_column("runs", column)
    op.drop_index("uq_schedules_origin", table_name="schedules")
    op.drop_index("ix_schedules_tenant", table_name="schedules")
    op.drop_index("ix_schedules_due", table_name="schedules")
    op.drop_table("schedules")
