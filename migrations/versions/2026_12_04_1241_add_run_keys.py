"""add run keys: one active run per (tenant, agent, key), a line per key, tags, idempotency keys

The seed's rule, "one active run per tenant and agent", becomes "one active run per tenant,
agent and key", still a partial unique index rather than application logic: the run at the head
of its key's line (QUEUED, RUNNING or WAITING, `queued_behind_id` NULL) is in it. Runs QUEUED
behind it under ENQUEUE carry `queued_behind_id` (the run just ahead) and are not in it; a
second unique index lets only one run stand directly behind another, so two concurrent ENQUEUEs
of one key cannot fork its line. A run written before this migration has the key '' (the
agent's default), so today's rows keep today's rule exactly.

The line moves on in the transaction that settles a run, whichever statement settles it: the
trigger `runs_line` (function `outlive_advance_line`) re-links the run behind the settled one to
the settled run's own place (the head's successor becomes the head), with a `line` event. No
process death between a settle and its follow-up can strand a line. A run waiting its turn takes
no slot of its tenant's cap: `outlive_dispatch_runs` and `ix_runs_waiting` leave it out until it
is the head.

`tags` (text[], GIN index over the runs that have some) and `idempotency_key` (unique per
tenant while set; a key older than 24 h is cleared by the next start that meets it) complete
`startRun`; `on_conflict` keeps the strategy a run was started with, for retryRun and replays.

Revision ID: 0015
Revises: 0017
Create Date: 2026-12-04 12:40:00
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision: str = "0015"
down_revision: str | None = "0017"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None

ACTIVE = "status IN ('QUEUED', 'RUNNING', 'WAITING')"
SETTLED = "('SUCCEEDED', 'FAILED', 'CANCELLED')"
HEAD = f"{ACTIVE} AND queued_behind_id IS NULL"
OLD_WAITING = "status = 'QUEUED' AND dispatched_at IS NULL"
NEW_WAITING = f"{OLD_WAITING} AND queued_behind_id IS NULL"

ADVANCE_LINE = """
CREATE OR REPLACE FUNCTION outlive_advance_line() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    WITH moved AS (
        UPDATE runs SET queued_behind_id = OLD.queued_behind_id, updated_at = now(),
               event_seq = event_seq + 1
         WHERE queued_behind_id = NEW.id AND status = 'QUEUED'
        RETURNING id, event_seq, queued_behind_id)
    INSERT INTO run_events (run_id, seq, type, data)
    SELECT m.id, m.event_seq, 'line',
           jsonb_build_object('settled', NEW.id, 'status', NEW.status,
                              'queuedBehindId', m.queued_behind_id)
      FROM moved m;
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
                       AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
                     ORDER BY w.created_at, w.id LIMIT greatest(cap - held, 0))
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL AND u.queued_behind_id IS NULL
    RETURNING u.id;
END $$;
"""
# As 0011 installed it: for the downgrade.
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
                       AND w.dispatched_at IS NULL
                     ORDER BY w.created_at, w.id LIMIT greatest(cap - held, 0))
       AND u.status = 'QUEUED' AND u.dispatched_at IS NULL
    RETURNING u.id;
END $$;
"""


def _waiting_index(predicate: str) -> None:
    op.drop_index("ix_runs_waiting", table_name="runs")
    op.create_index(
        "ix_runs_waiting",
        "runs",
        ["tenant_id", "created_at", "id"],
        postgresql_where=sa.text(predicate),
    )


def upgrade() -> None:
    op.add_column(
        "runs", sa.Column("key", sa.String(), server_default=sa.text("''"), nullable=False)
    )
    op.add_column("runs", sa.Column("on_conflict", sa.String(), nullable=True))
    op.add_column("runs", sa.Column("queued_behind_id", sa.Uuid(), nullable=True))
    op.add_column(
        "runs",
        sa.Column(
            "tags", postgresql.ARRAY(sa.String()), server_default=sa.text("'{}'"), nullable=False
        ),
    )
    op.add_column("runs", sa.Column("idempotency_key", sa.String(), nullable=True))
    op.drop_index("uq_runs_one_active_per_agent", table_name="runs")
    op.create_index(
        "uq_runs_one_active_per_key",
        "runs",
        ["tenant_id", "agent", "key"],
        unique=True,
        postgresql_where=sa.text(HEAD),
    )
    op.create_index(
        "uq_runs_queued_behind",
        "runs",
        ["queued_behind_id"],
        unique=True,
        postgresql_where=sa.text("status = 'QUEUED' AND queued_behind_id IS NOT NULL"),
    )
    op.create_index(
        "uq_runs_idempotency_key",
        "runs",
        ["tenant_id", "idempotency_key"],
        unique=True,
        postgresql_where=sa.text("idempotency_key IS NOT NULL"),
    )
    op.create_index(
        "ix_runs_tenant_key",
        "runs",
        ["tenant_id", "key", sa.text("created_at DESC"), sa.text("id DESC")],
        postgresql_where=sa.text("key <> ''"),
    )
    op.create_index(
        "ix_runs_tags",
        "runs",
        ["tags"],
        postgresql_using="gin",
        postgresql_where=sa.text("tags <> '{}'"),
    )
    _waiting_index(NEW_WAITING)
    op.execute(DISPATCH_RUNS)
    op.execute(ADVANCE_LINE)
    op.execute(
        "CREATE TRIGGER runs_line AFTER UPDATE OF status ON runs FOR EACH ROW"
        f" WHEN (OLD.{ACTIVE} AND NEW.status IN {SETTLED})"
        " EXECUTE FUNCTION outlive_advance_line()"
    )


def downgrade() -> None:
    op.execute("DROP TRIGGER runs_line ON runs")
    op.execute("DROP FUNCTION outlive_advance_line()")
    # A run waiting its turn has no place in the older schema: it settles CANCELLED, saying why;
    # so do all but the oldest head of each (tenant, agent).
    op.execute(
        "UPDATE runs SET status = 'CANCELLED', finished_at = now(),"
        " error = 'cancelled by a downgrade: it was queued behind another run of its key'"
        " WHERE status = 'QUEUED' AND queued_behind_id IS NOT NULL"
    )
    op.execute(
        "UPDATE runs r SET status = 'CANCELLED', finished_at = now(),"
        " error = 'cancelled by a downgrade: another run of its agent was active'"
        " WHERE r.status IN ('QUEUED', 'RUNNING', 'WAITING') AND EXISTS (SELECT 1 FROM runs o"
        " WHERE o.tenant_id = r.tenant_id AND o.agent = r.agent"
        " AND o.status IN ('QUEUED', 'RUNNING', 'WAITING')"
        " AND (o.created_at, o.id) < (r.created_at, r.id))"
    )
    op.execute(OLD_DISPATCH_RUNS)
    _waiting_index(OLD_WAITING)
    op.drop_index("ix_runs_tags", table_name="runs")
    op.drop_index("ix_runs_tenant_key", table_name="runs")
    op.drop_index("uq_runs_idempotency_key", table_name="runs")
    op.drop_index("uq_runs_queued_behind", table_name="runs")
    op.drop_index("uq_runs_one_active_per_key", table_name="runs")
    op.create_index(
        "uq_runs_one_active_per_agent",
        "runs",
        ["tenant_id", "agent"],
        unique=True,
        postgresql_where=sa.text(ACTIVE),
    )
    op.drop_column("runs", "idempotency_key")
    op.drop_column("runs", "tags")
    op.drop_column("runs", "queued_behind_id")
    op.drop_column("runs", "on_conflict")
    op.drop_column("runs", "key")
