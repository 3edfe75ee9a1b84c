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
        -- A pause seen is confirmed under a lock: a resume (its update of the tenant, or its
        -- delete of the agent's pause, then its wake of the held runs, in one transaction)
        -- either committed first, and is seen here (the run goes on), or waits for this
        -- transaction, and its wake then sees this run held. Read unlocked, the resume could
        -- wake the tenant's held runs between this read and this park: a run held on a
        -- resumed tenant, for good (found moving tenants between cells, issue 48).
        IF by_whom IS NOT NULL THEN
            by_whom := NULL;
            PERFORM 1 FROM tenants t WHERE t.id = r.tenant_id AND t.paused_at IS NOT NULL
               FOR SHARE;
            IF FOUND THEN
                by_whom := 'tenant';
            ELSE
                PERFORM 1 FROM agent_pauses a WHERE a.tenant_id = r.tenant_id
                   AND a.agent = r.agent FOR SHARE;
                IF FOUND THEN by_whom := 'agent'; END IF;
            END IF;
        END IF;
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
