"""dispatch runs: pick the tenant's waiting runs once, then update them by primary key

`outlive_dispatch_runs` admitted with `UPDATE runs u … WHERE u.id IN (SELECT … LIMIT n)`. With
statistics from before a burst of waiting runs (a flood written at once, before autovacuum's next
ANALYZE), PostgreSQL estimated one waiting run in all, scanned every tenant's waiting runs
(`ix_runs_waiting`) as the outer side of a semi join and ran the LIMIT subquery once per row: a
quiet tenant's dispatch read 1,500 index entries and 20,000 heap tuples, 4 ms at the median and
16 ms at p99 during the noisy-neighbour bench's flood (auto_explain), and the flood's own
dispatches kept PostgreSQL's backends busy on the shared cores (issue 26).

Now the pick is an InitPlan (`ARRAY(SELECT …)`), run once, and the update matches it by primary key
and by tenant, so no estimate can make one dispatch read other tenants' waiting runs or repeat the
pick. A tenant at its cap returns before the pick. The result is the same set of runs.

Revision ID: 0026
Revises: 0025
Create Date: 2026-12-05 08:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0026"
down_revision: str | None = "0025"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

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
    RETURN QUERY
    UPDATE runs u SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
     WHERE u.id IN (SELECT w.id FROM runs w
                     WHERE w.tenant_id = p_tenant AND w.status = 'QUEUED'
                       AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                     ORDER BY w.created_at, w.id LIMIT greatest(cap - held, 0))
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL AND u.queued_behind_id IS NULL
    RETURNING u.id;
END $$;
"""


def upgrade() -> None:
    op.execute(DISPATCH_RUNS)


def downgrade() -> None:
    op.execute(OLD_DISPATCH_RUNS)
