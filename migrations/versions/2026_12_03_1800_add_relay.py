"""add the relay: when each QUEUED run and PENDING delivery or invitation is due for a hand-off

PostgreSQL is the only truth; the queue is a copy of what is due. `relay_after` says when the
relay (`outlive.services.relay`, in every worker) should next make sure a row's job is in the
queue: 10 s after the row was admitted (the fast path, the enqueue after the commit, has handed
it by then; the relay only catches what it missed), then every `OUTLIVE_RELAY_RECHECK_S`, and at
once when a hand-off failed (`now()`). A partial index over the rows the relay may hand
(admitted, still QUEUED or PENDING) ordered by `relay_after` makes an idle scan one index probe
per table. `runs.handoff_failed_at` records that the queue could not be reached for a run, which
`waitingReason` says until the relay hands it.

A trigger wakes the relays (NOTIFY `outlive_relay`, sent at commit, collapsed per transaction)
whenever a row becomes due now; a row due later is found by the relays' slow scan.

The dispatch functions of 0005 are replaced by the same functions that also set `relay_after`
when they admit a row (10 s later: the dispatcher enqueues what it admits itself).

Revision ID: 0011
Revises: 0010
Create Date: 2026-12-03 18:00:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0011"
down_revision: str | None = "0010"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

FIRST_LOOK = "now() + interval '10 seconds'"  # also in outlive.db.models and the functions below
TABLES = {  # table -> the status whose admitted rows the relay hands
    "runs": "QUEUED",
    "webhook_deliveries": "PENDING",
    "invitations": "PENDING",
}

NOTIFY = """
CREATE OR REPLACE FUNCTION outlive_relay_notify() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('outlive_relay', TG_TABLE_NAME);
    RETURN NULL;
END $$;
"""

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
    UPDATE runs u SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
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
        UPDATE webhook_deliveries d
           SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
          FROM chosen c
         WHERE c.kind = 'webhook' AND d.id = c.id AND d.status = 'PENDING'
           AND d.dispatched_at IS NULL
        RETURNING 'webhook'::text, d.id),
    emails AS (
        UPDATE invitations i
           SET dispatched_at = now(), relay_after = now() + interval '10 seconds'
          FROM chosen c
         WHERE c.kind = 'invitation' AND i.id = c.id AND i.status = 'PENDING'
           AND i.dispatched_at IS NULL
        RETURNING 'invitation'::text, i.id)
    SELECT * FROM webhooks UNION ALL SELECT * FROM emails;
END $$;
"""


def upgrade() -> None:
    for table, status in TABLES.items():
        op.add_column(
            table,
            sa.Column(
                "relay_after",
                sa.DateTime(timezone=True),
                server_default=sa.text(FIRST_LOOK),
                nullable=False,
            ),
        )
        op.create_index(
            f"ix_{table}_relay",
            table,
            ["relay_after"],
            postgresql_where=sa.text(f"status = '{status}' AND dispatched_at IS NOT NULL"),
        )
    op.add_column("runs", sa.Column("handoff_failed_at", sa.DateTime(timezone=True)))
    # A waiting row's tenant is found by a loose scan over these (see `outlive.services.relay`).
    for table in ("webhook_deliveries", "invitations"):
        op.create_index(
            f"ix_{table}_waiting",
            table,
            ["tenant_id", "created_at"],
            postgresql_where=sa.text("status = 'PENDING' AND dispatched_at IS NULL"),
        )
    op.execute(NOTIFY)
    for table in TABLES:
        op.execute(
            f"CREATE TRIGGER {table}_relay_due AFTER UPDATE OF relay_after ON {table}"
            " FOR EACH ROW WHEN (NEW.relay_after <= now())"
            " EXECUTE FUNCTION outlive_relay_notify()"
        )
    op.execute(DISPATCH_RUNS)
    op.execute(DISPATCH_JOBS)


def downgrade() -> None:
    for function in (DISPATCH_RUNS, DISPATCH_JOBS):  # back to 0005's
        op.execute(function.replace(", relay_after = now() + interval '10 seconds'", ""))
    for table in TABLES:
        op.execute(f"DROP TRIGGER {table}_relay_due ON {table}")
    op.execute("DROP FUNCTION outlive_relay_notify()")
    for table in ("invitations", "webhook_deliveries"):
        op.drop_index(f"ix_{table}_waiting", table_name=table)
    op.drop_column("runs", "handoff_failed_at")
    for table in reversed(list(TABLES)):
        op.drop_index(f"ix_{table}_relay", table_name=table)
        op.drop_column(table, "relay_after")
