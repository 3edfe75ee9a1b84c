"""add tenant admission: per-tenant caps on runs and on jobs in flight, enforced in PostgreSQL

A run, a webhook delivery or an invitation is written waiting (`dispatched_at` NULL) unless it is
admitted at once; `outlive_dispatch_runs` and `outlive_dispatch_jobs` admit a tenant's waiting
rows, oldest first, up to its cap (`tenants.max_running_runs` / `max_inflight_jobs`, or the
deployment's default). Each locks the tenant's row first and then counts with a fresh snapshot
(every statement of a PL/pgSQL function takes its own), so two dispatchers of one tenant never
both see the same free slot: the cap holds across any number of processes.

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03 13:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0005"
down_revision: str | None = "0004"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

DISPATCH_RUNS = """
CREATE OR REPLACE FUNCTION outlive_dispatch_runs(p_tenant uuid, p_default integer)
RETURNS SETOF uuid LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_running_runs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    SELECT count(*) INTO held FROM runs r
     WHERE r.tenant_id = p_tenant AND r.status IN ('QUEUED', 'RUNNING')
       AND r.dispatched_at IS NOT NULL;
    RETURN QUERY
    UPDATE runs u SET dispatched_at = now()
     WHERE u.id IN (SELECT w.id FROM runs w
                     WHERE w.tenant_id = p_tenant AND w.status = 'QUEUED'
                       AND w.dispatched_at IS NULL
                     ORDER BY w.created_at, w.id LIMIT greatest(cap - held, 0))
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL
    RETURNING u.id;
END $$;
"""

DISPATCH_JOBS = """
CREATE OR REPLACE FUNCTION outlive_dispatch_jobs(p_tenant uuid, p_default integer)
RETURNS TABLE (kind text, id uuid) LANGUAGE plpgsql AS $$
DECLARE
    cap integer;
    held integer;
BEGIN
    SELECT coalesce(t.max_inflight_jobs, p_default) INTO cap
      FROM tenants t WHERE t.id = p_tenant FOR UPDATE;
    IF NOT FOUND THEN RETURN; END IF;
    SELECT (SELECT count(*) FROM webhook_deliveries d WHERE d.tenant_id = p_tenant
              AND d.status = 'PENDING' AND d.dispatched_at IS NOT NULL)
         + (SELECT count(*) FROM invitations i WHERE i.tenant_id = p_tenant
              AND i.status = 'PENDING' AND i.dispatched_at IS NOT NULL)
      INTO held;
    IF held >= cap THEN RETURN; END IF;
    RETURN QUERY
    WITH chosen AS (
        SELECT w.kind, w.id FROM (
            SELECT 'webhook' AS kind, d.id, d.created_at FROM webhook_deliveries d
             WHERE d.tenant_id = p_tenant AND d.status = 'PENDING' AND d.dispatched_at IS NULL
            UNION ALL
            SELECT 'invitation', i.id, i.created_at FROM invitations i
             WHERE i.tenant_id = p_tenant AND i.status = 'PENDING' AND i.dispatched_at IS NULL
        ) w ORDER BY w.created_at, w.id LIMIT cap - held),
    webhooks AS (
        UPDATE webhook_deliveries d SET dispatched_at = now() FROM chosen c
         WHERE c.kind = 'webhook' AND d.id = c.id AND d.status = 'PENDING'
           AND d.dispatched_at IS NULL
        RETURNING 'webhook'::text, d.id),
    emails AS (
        UPDATE invitations i SET dispatched_at = now() FROM chosen c
         WHERE c.kind = 'invitation' AND i.id = c.id AND i.status = 'PENDING'
           AND i.dispatched_at IS NULL
        RETURNING 'invitation'::text, i.id)
    SELECT * FROM webhooks UNION ALL SELECT * FROM emails;
END $$;
"""


def upgrade() -> None:
    op.add_column("tenants", sa.Column("max_running_runs", sa.Integer(), nullable=True))
    op.add_column("tenants", sa.Column("max_inflight_jobs", sa.Integer(), nullable=True))
    for table in ("runs", "webhook_deliveries", "invitations"):
        op.add_column(table, sa.Column("dispatched_at", sa.DateTime(timezone=True), nullable=True))
    # What is in flight today was dispatched when it was written.
    op.execute("UPDATE runs SET dispatched_at = created_at WHERE status IN ('QUEUED', 'RUNNING')")
    op.execute("UPDATE webhook_deliveries SET dispatched_at = created_at WHERE status = 'PENDING'")
    op.execute("UPDATE invitations SET dispatched_at = created_at WHERE status = 'PENDING'")
    op.create_index(
        "ix_runs_waiting",
        "runs",
        ["tenant_id", "created_at", "id"],
        postgresql_where=sa.text("status = 'QUEUED' AND dispatched_at IS NULL"),
    )
    op.create_index(  # a tenant's runs in flight, counted by every dispatch
        "ix_runs_in_flight",
        "runs",
        ["tenant_id"],
        postgresql_where=sa.text("status IN ('QUEUED', 'RUNNING') AND dispatched_at IS NOT NULL"),
    )
    op.create_index(
        "ix_webhook_deliveries_pending",
        "webhook_deliveries",
        ["tenant_id", "created_at", "id"],
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.create_index(
        "ix_invitations_pending",
        "invitations",
        ["tenant_id", "created_at", "id"],
        postgresql_where=sa.text("status = 'PENDING'"),
    )
    op.execute(DISPATCH_RUNS)
    op.execute(DISPATCH_JOBS)


def downgrade() -> None:
    op.execute("DROP FUNCTION outlive_dispatch_jobs(uuid, integer)")
    op.execute("DROP FUNCTION outlive_dispatch_runs(uuid, integer)")
    op.drop_index("ix_invitations_pending", table_name="invitations")
    op.drop_index("ix_webhook_deliveries_pending", table_name="webhook_deliveries")
    op.drop_index("ix_runs_in_flight", table_name="runs")
    op.drop_index("ix_runs_waiting", table_name="runs")
    for table in ("invitations", "webhook_deliveries", "runs"):
        op.drop_column(table, "dispatched_at")
    op.drop_column("tenants", "max_inflight_jobs")
    op.drop_column("tenants", "max_running_runs")
