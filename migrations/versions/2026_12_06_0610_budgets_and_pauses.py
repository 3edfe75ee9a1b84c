"""budgets and pauses: spend held by budgets, runs held by pauses (issue 42)

`budgets` (scope, target, period, limits, warnAt, onBreach), `budget_periods` (what each UTC
day or month recorded, and the models it could not price) and `budget_reservations` (a step's
expected usage, held from its start to its commit, counted while its attempt holds the run).
`runs.paused_at` / `paused_by` / `held_by_budget_id` / `budget_override`, `tenants.paused_at` and
`agent_pauses`: what holds a run. Pauses and holds live here, so they survive Redis being
emptied.

Revision ID: 0028
Revises: 0027
Create Date: 2026-12-06 05:16:48.774857
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = "0028"
down_revision: str | None = "0027"
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


# Frozen copies of src/outlive/db/functions/outlive_period_start.sql and outlive_step_gate.sql
# at this revision.
PERIOD_START = """
CREATE OR REPLACE FUNCTION outlive_period_start(p_period text, p_next boolean DEFAULT false)
RETURNS timestamptz LANGUAGE sql STABLE AS $$
    -- The start of the budget period that holds now (UTC days and months), or of the next one;
    -- NULL for a run's own period.
    SELECT CASE p_period
        WHEN 'DAY' THEN (date_trunc('day', now() AT TIME ZONE 'UTC')
                         + CASE WHEN p_next THEN interval '1 day' ELSE interval '0' END)
                        AT TIME ZONE 'UTC'
        WHEN 'MONTH' THEN (date_trunc('month', now() AT TIME ZONE 'UTC')
                           + CASE WHEN p_next THEN interval '1 month' ELSE interval '0' END)
                          AT TIME ZONE 'UTC'
    END
$$;
"""
STEP_GATE = """
CREATE OR REPLACE FUNCTION outlive_step_gate(
    p_run uuid, p_attempt integer, p_name text, p_occurrence integer,
    p_tokens bigint, p_usd numeric)
RETURNS TABLE (verdict text, budget_id uuid, touched uuid[], started timestamptz)
LANGUAGE plpgsql AS $$
DECLARE
    r runs%ROWTYPE;
    b budgets%ROWTYPE;
    by_whom text;
    spent_t bigint;
    spent_u numeric;
    held_t bigint;
    held_u numeric;
    over boolean;
    warned timestamptz;
    applies uuid[] := '{}';
    changed uuid[] := '{}';
BEGIN
    -- The gate before a step of attempt `p_attempt` starts (services/runs/holds.py, the
    -- transition table): the attempt must still hold the run; a cancel, a pause (the run's,
    -- its agent's, its tenant's) or a budget the step's expected usage would pass stops it
    -- here, so no step starts after a pause or a hold committed. Otherwise the expected usage
    -- is reserved against every budget that applies, until the step's commit settles it.
    SELECT * INTO r FROM runs WHERE id = p_run FOR UPDATE;
    IF NOT FOUND OR r.status <> 'RUNNING' OR r.attempt <> p_attempt THEN
        RETURN QUERY SELECT 'gone', NULL::uuid, changed, NULL::timestamptz; RETURN;
    END IF;
    IF r.cancel_requested_at IS NOT NULL THEN
        RETURN QUERY SELECT 'cancel', NULL::uuid, changed, NULL::timestamptz; RETURN;
    END IF;
    IF r.paused_at IS NULL THEN
        SELECT CASE WHEN t.paused_at IS NOT NULL THEN 'tenant'
                    WHEN EXISTS (SELECT 1 FROM agent_pauses a
                                  WHERE a.tenant_id = r.tenant_id AND a.agent = r.agent)
                    THEN 'agent' END
          INTO by_whom FROM tenants t WHERE t.id = r.tenant_id;
    END IF;
    IF r.paused_at IS NOT NULL OR by_whom IS NOT NULL THEN  -- RUNNING -> WAITING (pause)
        UPDATE runs SET status = 'WAITING', waiting_for = 'pause', wake_at = NULL,
               lease_expires_at = NULL, paused_at = coalesce(paused_at, now()),
               paused_by = coalesce(paused_by, by_whom), event_seq = event_seq + 1,
               updated_at = now()
         WHERE id = p_run;
        INSERT INTO run_events (run_id, seq, type, data)
        VALUES (p_run, r.event_seq + 1, 'waiting', '{"for": "pause", "until": null}');
        RETURN QUERY SELECT 'paused', NULL::uuid, changed, NULL::timestamptz; RETURN;
    END IF;
    FOR b IN SELECT * FROM budgets x
              WHERE x.tenant_id = r.tenant_id
                AND (x.scope IN ('TENANT', 'RUN') OR (x.scope = 'AGENT' AND x.target = r.agent)
                     OR (x.scope = 'TAG' AND x.target = ANY (r.tags)))
              ORDER BY x.id FOR UPDATE
    LOOP
        -- What was recorded and what is reserved, read in ONE statement (one snapshot): a step
        -- that commits meanwhile moves its usage from reserved to recorded, and two reads could
        -- see it in neither.
        IF b.period = 'RUN' THEN  -- the run's own usage, and what its attempt holds
            SELECT s.t, s.u, v.t, v.u INTO spent_t, spent_u, held_t, held_u
              FROM (SELECT coalesce(sum(input_tokens + output_tokens), 0) AS t,
                           coalesce(sum(cost_usd), 0) AS u
                      FROM run_steps WHERE run_id = p_run) s,
                   (SELECT coalesce(sum(q.tokens), 0) AS t, coalesce(sum(q.usd), 0) AS u
                      FROM budget_reservations q
                     WHERE q.budget_id = b.id AND q.run_id = p_run AND q.attempt = p_attempt) v;
        ELSE  -- the period's record, and the reservations of attempts that hold their run
            SELECT s.t, s.u, s.w, v.t, v.u INTO spent_t, spent_u, warned, held_t, held_u
              FROM (SELECT coalesce(max(p.spent_tokens), 0) AS t,
                           coalesce(max(p.spent_usd), 0) AS u, max(p.warned_at) AS w
                      FROM budget_periods p
                     WHERE p.budget_id = b.id
                       AND p.period_start = outlive_period_start(b.period)) s,
                   (SELECT coalesce(sum(q.tokens), 0) AS t, coalesce(sum(q.usd), 0) AS u
                      FROM budget_reservations q JOIN runs x ON x.id = q.run_id
                     WHERE q.budget_id = b.id AND x.status = 'RUNNING'
                       AND x.attempt = q.attempt) v;
        END IF;
        over := (b.limit_tokens IS NOT NULL AND spent_t + held_t + p_tokens > b.limit_tokens)
             OR (b.limit_usd IS NOT NULL AND spent_u + held_u + p_usd > b.limit_usd);
        IF over AND NOT r.budget_override AND b.on_breach = 'PAUSE' THEN
            -- RUNNING -> WAITING (budget): no worker held; a new period wakes it (its timer)
            UPDATE runs SET status = 'WAITING', waiting_for = 'budget',
                   wake_at = outlive_period_start(b.period, true), lease_expires_at = NULL,
                   held_by_budget_id = b.id, event_seq = event_seq + 2, updated_at = now()
             WHERE id = p_run;
            INSERT INTO run_events (run_id, seq, type, data) VALUES
                (p_run, r.event_seq + 1, 'budget', jsonb_build_object(
                    'budgetId', b.id, 'breach', 'PAUSE', 'limitTokens', b.limit_tokens,
                    'limitUsd', b.limit_usd, 'spentTokens', spent_t, 'spentUsd', spent_u,
                    'reservedTokens', held_t, 'expectedTokens', p_tokens)),
                (p_run, r.event_seq + 2, 'waiting', jsonb_build_object(
                    'for', 'budget', 'until', outlive_period_start(b.period, true)));
            RETURN QUERY SELECT 'held', b.id, changed || b.id, NULL::timestamptz; RETURN;
        END IF;
        IF over AND NOT r.budget_override AND b.on_breach = 'CANCEL' THEN
            UPDATE runs SET cancel_requested_at = now(), event_seq = event_seq + 1,
                   updated_at = now()
             WHERE id = p_run;
            INSERT INTO run_events (run_id, seq, type, data) VALUES
                (p_run, r.event_seq + 1, 'budget', jsonb_build_object(
                    'budgetId', b.id, 'breach', 'CANCEL', 'limitTokens', b.limit_tokens,
                    'limitUsd', b.limit_usd, 'spentTokens', spent_t, 'spentUsd', spent_u));
            RETURN QUERY SELECT 'over', b.id, changed || b.id, NULL::timestamptz; RETURN;
        END IF;
        IF b.period <> 'RUN' AND warned IS NULL AND b.warn_at > 0
           AND ((b.limit_tokens IS NOT NULL
                 AND spent_t + held_t + p_tokens >= b.warn_at * b.limit_tokens)
                OR (b.limit_usd IS NOT NULL
                    AND spent_u + held_u + p_usd >= b.warn_at * b.limit_usd)) THEN
            -- once a period: the run that crossed it gets a `budget` warning
            INSERT INTO budget_periods AS p (budget_id, period_start, warned_at)
            VALUES (b.id, outlive_period_start(b.period), now())
            ON CONFLICT ON CONSTRAINT pk_budget_periods DO UPDATE SET warned_at = now();
            UPDATE runs SET event_seq = event_seq + 1 WHERE id = p_run
            RETURNING event_seq INTO r.event_seq;
            INSERT INTO run_events (run_id, seq, type, data) VALUES
                (p_run, r.event_seq, 'budget', jsonb_build_object(
                    'budgetId', b.id, 'warn', true, 'over', over,
                    'limitTokens', b.limit_tokens, 'limitUsd', b.limit_usd,
                    'spentTokens', spent_t, 'reservedTokens', held_t));
            changed := changed || b.id;
        END IF;
        applies := applies || b.id;
    END LOOP;
    IF p_tokens > 0 OR p_usd > 0 THEN
        DELETE FROM budget_reservations v WHERE v.run_id = p_run AND v.attempt < p_attempt;
        INSERT INTO budget_reservations AS v
               (budget_id, run_id, name, occurrence, attempt, tokens, usd)
        SELECT a, p_run, p_name, p_occurrence, p_attempt, p_tokens, p_usd FROM unnest(applies) a
        ON CONFLICT ON CONSTRAINT pk_budget_reservations DO UPDATE
           SET attempt = excluded.attempt, tokens = excluded.tokens, usd = excluded.usd;
        changed := changed || applies;
    END IF;
    -- the step starts now: its run_steps row keeps when (after every check above)
    RETURN QUERY SELECT 'go', NULL::uuid, changed, clock_timestamp();
END $$;
"""


def upgrade() -> None:
    op.create_table(
        "agent_pauses",
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("agent", sa.String(), nullable=False),
        sa.Column(
            "paused_at", sa.DateTime(timezone=True), server_default=sa.text("now()"), nullable=False
        ),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_agent_pauses_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("tenant_id", "agent", name=op.f("pk_agent_pauses")),
    )
    op.create_table(
        "budgets",
        sa.Column("id", sa.Uuid(), server_default=sa.text("gen_random_uuid()"), nullable=False),
        sa.Column("tenant_id", sa.Uuid(), nullable=False),
        sa.Column("scope", sa.String(), nullable=False),
        sa.Column("target", sa.String(), server_default=sa.text("''"), nullable=False),
        sa.Column("period", sa.String(), nullable=False),
        sa.Column("limit_tokens", sa.BigInteger(), nullable=True),
        sa.Column("limit_usd", sa.Numeric(), nullable=True),
        sa.Column("warn_at", sa.Double(), server_default=sa.text("0.8"), nullable=False),
        sa.Column("on_breach", sa.String(), server_default=sa.text("'PAUSE'"), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.Column(
            "updated_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.CheckConstraint(
            "on_breach IN ('PAUSE', 'CANCEL', 'WARN')", name=op.f("ck_budgets_on_breach")
        ),
        sa.CheckConstraint("period IN ('DAY', 'MONTH', 'RUN')", name=op.f("ck_budgets_period")),
        sa.CheckConstraint(
            "scope IN ('TENANT', 'AGENT', 'TAG', 'RUN')", name=op.f("ck_budgets_scope")
        ),
        sa.CheckConstraint("warn_at >= 0 AND warn_at <= 1", name=op.f("ck_budgets_warn_at")),
        sa.ForeignKeyConstraint(
            ["tenant_id"],
            ["tenants.id"],
            name=op.f("fk_budgets_tenant_id_tenants"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("id", name=op.f("pk_budgets")),
    )
    op.create_index(
        "uq_budgets_scope", "budgets", ["tenant_id", "scope", "target", "period"], unique=True
    )
    op.create_table(
        "budget_periods",
        sa.Column("budget_id", sa.Uuid(), nullable=False),
        sa.Column("period_start", sa.DateTime(timezone=True), nullable=False),
        sa.Column("spent_tokens", sa.BigInteger(), server_default=sa.text("0"), nullable=False),
        sa.Column("spent_usd", sa.Numeric(), server_default=sa.text("0"), nullable=False),
        sa.Column(
            "unpriced_models", sa.ARRAY(sa.String()), server_default=sa.text("'{}'"), nullable=False
        ),
        sa.Column("warned_at", sa.DateTime(timezone=True), nullable=True),
        sa.ForeignKeyConstraint(
            ["budget_id"],
            ["budgets.id"],
            name=op.f("fk_budget_periods_budget_id_budgets"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint("budget_id", "period_start", name=op.f("pk_budget_periods")),
    )
    op.create_table(
        "budget_reservations",
        sa.Column("budget_id", sa.Uuid(), nullable=False),
        sa.Column("run_id", sa.Uuid(), nullable=False),
        sa.Column("name", sa.String(), nullable=False),
        sa.Column("occurrence", sa.Integer(), nullable=False),
        sa.Column("attempt", sa.Integer(), nullable=False),
        sa.Column("tokens", sa.BigInteger(), nullable=False),
        sa.Column("usd", sa.Numeric(), nullable=False),
        sa.Column(
            "created_at",
            sa.DateTime(timezone=True),
            server_default=sa.text("now()"),
            nullable=False,
        ),
        sa.ForeignKeyConstraint(
            ["budget_id"],
            ["budgets.id"],
            name=op.f("fk_budget_reservations_budget_id_budgets"),
            ondelete="CASCADE",
        ),
        sa.ForeignKeyConstraint(
            ["run_id"],
            ["runs.id"],
            name=op.f("fk_budget_reservations_run_id_runs"),
            ondelete="CASCADE",
        ),
        sa.PrimaryKeyConstraint(
            "budget_id", "run_id", "name", "occurrence", name=op.f("pk_budget_reservations")
        ),
    )
    op.create_index(
        "ix_budget_reservations_run", "budget_reservations", ["run_id", "attempt"], unique=False
    )
    op.add_column("runs", sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("runs", sa.Column("paused_by", sa.String(), nullable=True))
    op.add_column("runs", sa.Column("held_by_budget_id", sa.Uuid(), nullable=True))
    op.add_column(
        "runs",
        sa.Column("budget_override", sa.Boolean(), server_default=sa.text("false"), nullable=False),
    )
    op.create_index(
        "ix_runs_held_by_budget",
        "runs",
        ["held_by_budget_id"],
        unique=False,
        postgresql_where=sa.text("held_by_budget_id IS NOT NULL"),
    )
    op.create_index(
        "ix_runs_paused",
        "runs",
        ["tenant_id", "agent"],
        unique=False,
        postgresql_where=sa.text("paused_at IS NOT NULL"),
    )
    op.create_foreign_key(
        op.f("fk_runs_held_by_budget_id_budgets"),
        "runs",
        "budgets",
        ["held_by_budget_id"],
        ["id"],
        ondelete="SET NULL",
    )
    op.add_column("tenants", sa.Column("paused_at", sa.DateTime(timezone=True), nullable=True))
    op.add_column("run_steps", sa.Column("started_at", sa.DateTime(timezone=True), nullable=True))
    op.execute(PERIOD_START)
    op.execute(STEP_GATE)


def downgrade() -> None:
    op.execute("DROP FUNCTION outlive_step_gate(uuid, integer, text, integer, bigint, numeric)")
    op.execute("DROP FUNCTION outlive_period_start(text, boolean)")
    op.drop_column("run_steps", "started_at")
    op.drop_column("tenants", "paused_at")
    op.drop_constraint(op.f("fk_runs_held_by_budget_id_budgets"), "runs", type_="foreignkey")
    op.drop_index(
        "ix_runs_paused", table_name="runs", postgresql_where=sa.text("paused_at IS NOT NULL")
    )
    op.drop_index(
        "ix_runs_held_by_budget",
        table_name="runs",
        postgresql_where=sa.text("held_by_budget_id IS NOT NULL"),
    )
    op.drop_column("runs", "budget_override")
    op.drop_column("runs", "held_by_budget_id")
    op.drop_column("runs", "paused_by")
    op.drop_column("runs", "paused_at")
    op.drop_index("ix_budget_reservations_run", table_name="budget_reservations")
    op.drop_table("budget_reservations")
    op.drop_table("budget_periods")
    op.drop_index("uq_budgets_scope", table_name="budgets")
    op.drop_table("budgets")
    op.drop_table("agent_pauses")
