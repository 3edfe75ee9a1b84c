"""The statements of the durable-step journal (`services.runs.steps`): a step's completion,
which also settles its budget reservations, and the reads of a run's journal and steps. Built
once at import from constants; every value is a bound parameter."""

from __future__ import annotations

from sqlalchemy import ARRAY, Integer, Uuid, bindparam, column, text

from outlive.db.models import RunStep
from outlive.db.raw import prepare
from outlive.services.runs.queries import ACTIVE, LEASE, RUN_COLUMNS, Move
from outlive.services.runs.timeline import INSERT_EVENTS, bump

# --- durable steps (`services.runs.steps`) ----------------------------------------------------

# A step's completion, fenced like every write of an attempt but stricter (RUNNING, this
# attempt): the journal row, its `seq` from `runs.step_seq`, and the events buffered while the
# step ran followed by its `step` event (`:events`, a JSON array of {type, data}), with gap-free
# seqs, in one statement. A superseded attempt matches nothing and records nothing.
# The step's reservations (`outlive_step_gate`) become what it recorded: they are released, and
# its usage is added to the period of every day and month budget of the run's scope (a run's own
# budget reads its steps). A model the step could not price is named in the period.
_BUDGETS_OF_RUN = (
    "b.tenant_id = moved.tenant_id AND (b.scope = 'TENANT' OR (b.scope = 'AGENT'"
    " AND b.target = moved.agent) OR (b.scope = 'TAG' AND b.target = ANY (moved.tags)))"
)
_SETTLE_RESERVATIONS = f"""released AS (
                DELETE FROM budget_reservations v USING moved
                 WHERE v.run_id = moved.id AND v.name = :name AND v.occurrence = :occurrence),
            spent AS (
                INSERT INTO budget_periods AS p
                       (budget_id, period_start, spent_tokens, spent_usd, unpriced_models)
                SELECT b.id, outlive_period_start(b.period), :input_tokens + :output_tokens,
                       coalesce(CAST(:cost_usd AS numeric), 0),
                       CASE WHEN CAST(:model AS text) IS NOT NULL AND :cost_usd IS NULL
                            THEN ARRAY[CAST(:model AS text)] ELSE '{{}}' END
                  FROM moved JOIN budgets b ON {_BUDGETS_OF_RUN}
                 WHERE b.period <> 'RUN' AND (:input_tokens + :output_tokens > 0
                       OR CAST(:cost_usd AS numeric) > 0)
                ON CONFLICT ON CONSTRAINT pk_budget_periods DO UPDATE
                   SET spent_tokens = p.spent_tokens + excluded.spent_tokens,
                       spent_usd = p.spent_usd + excluded.spent_usd,
                       unpriced_models = ARRAY(SELECT DISTINCT m FROM unnest(
                           p.unpriced_models || excluded.unpriced_models) m))"""


def _step_done(settles_calls: bool) -> Move:
    """A step's record; `settles_calls`: it also deletes the model calls this attempt made for
    it (`run_calls`), now recorded (`services.runs.calls`)."""
    calls = (
        """,
            settled_calls AS (
                DELETE FROM run_calls c USING moved
                 WHERE c.run_id = moved.id AND c.step = :name AND c.occurrence = :occurrence
                   AND c.attempt = :attempt AND c.ended_at IS NULL)"""
        if settles_calls
        else ""
    )
    return Move(
        prepare(
            text(
                f"""WITH moved AS (
                UPDATE runs SET step_seq = step_seq + 1,
                    {bump("jsonb_array_length(CAST(:events AS jsonb))")},
                    {LEASE}, updated_at = now()
                WHERE id = :run_id AND {ACTIVE} AND status = 'RUNNING' AND attempt = :attempt
                RETURNING *),
            stepped AS (
                INSERT INTO run_steps (run_id, name, occurrence, seq, attempt, result,
                                       requests, input_tokens, output_tokens, model, cost_usd,
                                       started_at, code_version)
                SELECT id, :name, :occurrence, step_seq, attempt, CAST(:result AS jsonb),
                       :requests, :input_tokens, :output_tokens, CAST(:model AS text),
                       CAST(:cost_usd AS numeric), CAST(:started_at AS timestamptz),
                       CAST(:code_version AS text)
                FROM moved),
            appended AS (
                {INSERT_EVENTS}
                SELECT moved.id,
                       moved.event_seq - jsonb_array_length(CAST(:events AS jsonb)) + e.ord,
                       e.value->>'type', e.value->'data'
                FROM moved,
                     jsonb_array_elements(CAST(:events AS jsonb)) WITH ORDINALITY AS e(value, ord)),
            {_SETTLE_RESERVATIONS}{calls}
            SELECT moved.* FROM moved"""
            ).columns(*RUN_COLUMNS)
        ),
        changes_run=False,
        may_settle=False,
    )


STEP_DONE = _step_done(settles_calls=False)
STEP_DONE_CALLED = _step_done(settles_calls=True)  # a step that made model calls
# The whole journal of a run, loaded once at the start of an attempt; results as JSON text,
# decoded only when a step asks for one.
# The journal in completion order, each row with the bytes up to and including it; rows past
# `:max_bytes` are not sent, save the first one (which tells the caller the journal is over it).
JOURNAL = prepare(
    text(
        "SELECT name, occurrence, result, upto, code_version FROM ("
        " SELECT name, occurrence, result::text AS result, code_version,"
        " sum(octet_length(result::text)) OVER (ORDER BY seq) AS upto"
        " FROM run_steps WHERE run_id = :run_id) j"
        " WHERE upto - coalesce(octet_length(result), 0) <= :max_bytes ORDER BY upto"
    ).columns(
        RunStep.name, RunStep.occurrence, column("result"), column("upto"), RunStep.code_version
    )
)
# `RunStep.result`, by (run, seq): only the steps a client asked for the result of.
STEP_RESULTS = prepare(
    text(
        "SELECT s.run_id, s.seq, s.result::text AS result"
        " FROM unnest(:run_ids, :seqs) AS k(id, seq)"
        " JOIN run_steps s ON s.run_id = k.id AND s.seq = k.seq"
    ).bindparams(bindparam("run_ids", type_=ARRAY(Uuid())), bindparam("seqs", type_=ARRAY(Integer)))
)
STEPS_OF_RUNS = prepare(
    text(
        "SELECT s.run_id, s.seq, s.name, s.occurrence, s.attempt, s.completed_at, s.started_at,"
        " s.requests, s.input_tokens, s.output_tokens, s.model, s.cost_usd"
        " FROM unnest(:run_ids) AS r(id)"
        " CROSS JOIN LATERAL (SELECT run_id, seq, name, occurrence, attempt, completed_at,"
        " started_at, requests, input_tokens, output_tokens, model, cost_usd"
        "   FROM run_steps WHERE run_id = r.id AND seq > :after ORDER BY seq LIMIT :first) s"
    )
    .bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
    .columns(
        RunStep.run_id,
        RunStep.seq,
        RunStep.name,
        RunStep.occurrence,
        RunStep.attempt,
        RunStep.completed_at,
        RunStep.started_at,
        RunStep.requests,
        RunStep.input_tokens,
        RunStep.output_tokens,
        RunStep.model,
        RunStep.cost_usd,
    )
)

# `retryRun(reuseSteps: true)`: the new run starts with a copy of the old run's journal (same
# names, occurrences and seqs; `attempt` 0 marks a step it did not execute itself) and no usage
# (the old run paid for it). `step_seq` follows, so the first attempt loads the journal.
COPY_STEPS = prepare(
    text(
        f"""WITH copied AS (
                INSERT INTO run_steps (run_id, name, occurrence, seq, attempt, result,
                                       code_version)
                SELECT :to_run, name, occurrence, seq, 0, result, code_version FROM run_steps
                WHERE run_id = :from_run
                RETURNING seq)
            UPDATE runs SET step_seq = (SELECT coalesce(max(seq), 0) FROM copied)
            WHERE id = :to_run AND {ACTIVE} RETURNING step_seq"""
    )
)
