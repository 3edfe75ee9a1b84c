"""dispatch runs under FOR NO KEY UPDATE of the tenant's row, not FOR UPDATE

`outlive_dispatch_runs` serialises a tenant's dispatchers on the tenant's row. FOR UPDATE also
conflicts with the FOR KEY SHARE lock that every INSERT into `runs` takes on the tenant's row
(the foreign key), which deadlocked a start that had cancelled or moved up a run (CANCEL_PREVIOUS,
a line moving on) and then inserted, against a dispatcher that had locked the tenant and waited
for that run's row. FOR NO KEY UPDATE still excludes every other dispatcher (it conflicts with
itself) and lets inserts through; a run inserted meanwhile is admitted by its own dispatch.

Revision ID: 0015b
Revises: 0018
Create Date: 2026-12-04 13:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

from alembic import op

revision: str = "0015b"
down_revision: str | None = "0018"
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
OLD_DISPATCH_RUNS = """
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
