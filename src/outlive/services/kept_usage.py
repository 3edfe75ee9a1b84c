"""What deleted runs counted towards usage, folded in by the statement that deletes them.

Retention and `eraseSubject` delete runs and their steps; `usage` and `usageTokens` are totals a
tenant is billed by, so they must not change when runs go. Each statement that deletes runs (or
steps) is one SQL statement whose data-modifying CTEs add what the deleted rows counted to
`usage_kept_runs` / `usage_kept_tokens` in the same snapshot and transaction: a crash between two
batches loses nothing and counts nothing twice. The usage reads add these rows to what they
count from `runs` (`outlive.services.usage`, `outlive.services.usage_tokens`).
"""

from __future__ import annotations

# `gone`: a CTE of deleted run_steps rows (run_id, completed_at, model, requests, input_tokens,
# output_tokens, cost_usd) and `owners` one of (id, tenant_id, agent) of their runs.
KEEP_STEPS = """
kept_tokens AS (
  INSERT INTO usage_kept_tokens
    (tenant_id, day, agent, model, requests, input_tokens, output_tokens, cost_usd, unpriced)
  SELECT o.tenant_id, (g.completed_at AT TIME ZONE 'UTC')::date, o.agent,
         coalesce(g.model, ''), sum(g.requests), sum(g.input_tokens), sum(g.output_tokens),
         sum(g.cost_usd), count(*) FILTER (WHERE g.cost_usd IS NULL)
    FROM gone g JOIN owners o ON o.id = g.run_id
   WHERE g.requests > 0
   GROUP BY 1, 2, 3, 4
  ON CONFLICT (tenant_id, day, agent, model) DO UPDATE SET
    requests = usage_kept_tokens.requests + EXCLUDED.requests,
    input_tokens = usage_kept_tokens.input_tokens + EXCLUDED.input_tokens,
    output_tokens = usage_kept_tokens.output_tokens + EXCLUDED.output_tokens,
    cost_usd = CASE WHEN usage_kept_tokens.cost_usd IS NULL AND EXCLUDED.cost_usd IS NULL
                    THEN NULL
                    ELSE coalesce(usage_kept_tokens.cost_usd, 0) + coalesce(EXCLUDED.cost_usd, 0)
               END,
    unpriced = usage_kept_tokens.unpriced + EXCLUDED.unpriced
)"""

# `dead`: a CTE of deleted runs rows (tenant_id, created_at, agent, status).
KEEP_RUNS = """
kept_runs AS (
  INSERT INTO usage_kept_runs (tenant_id, day, agent, status, count)
  SELECT tenant_id, (created_at AT TIME ZONE 'UTC')::date, agent, status, count(*)
    FROM dead GROUP BY 1, 2, 3, 4
  ON CONFLICT (tenant_id, day, agent, status) DO UPDATE SET
    count = usage_kept_runs.count + EXCLUDED.count
)"""

STEP_COLUMNS = "run_id, completed_at, model, requests, input_tokens, output_tokens, cost_usd"
