"""The statements that hold a run (a pause, a budget) and let it go, built once at import.

Holding a QUEUED run (the head of its key's line) or a WAITING one is at once: WAITING for
'pause', no timer (a sleep that came due meanwhile resumes when it is let go: the attempt that
replays to it finds it due). A RUNNING run, or one QUEUED behind another of its key, is only
marked (`paused_at`): it is held at its next step, by the gate (`outlive_step_gate`). Letting go
of a held run makes it QUEUED again as any wake does (`WOKEN_SETS`): a new claim, not a retry.
"""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.services.runs.queries import ACTIVE, RUN_COLUMNS, locked_first, move
from outlive.services.runs.timeline import appended, bump
from outlive.services.runs.wake_queries import WOKEN_SETS

# The gate before a step starts (the function's comments say what it decides).
GATE = prepare(
    text(
        "SELECT verdict, budget_id, touched, started FROM outlive_step_gate(:run_id, :attempt,"
        " :name, :occurrence, :tokens, CAST(:usd AS numeric))"
    )
)

_HOLDABLE = "((status = 'QUEUED' AND queued_behind_id IS NULL) OR status = 'WAITING')"
# Who paused it: the first pause names it, but a pause of the run itself outranks the agent's
# and the tenant's (resuming those leaves it held).
# `paused_at` is clock_timestamp(), taken once the run's row is locked (locked first, in a CTE:
# an UPDATE computes its new row before it waits on a lock-only holder such as a step gate, then
# writes what it computed): after any step gate that held the row committed, so every step that
# started has `started_at` before it (tests/resolvers/test_pause_many.py; now() is the
# transaction's start, which a gate in flight can follow too).
_PAUSED_SETS = (
    "paused_by = CASE WHEN paused_at IS NULL OR CAST(:by AS text) = 'run' THEN CAST(:by AS text)"
    " ELSE paused_by END, paused_at = coalesce(paused_at, clock_timestamp()),"
    f" waiting_for = CASE WHEN {_HOLDABLE} THEN 'pause' ELSE waiting_for END,"
    f" wake_at = CASE WHEN {_HOLDABLE} THEN NULL ELSE wake_at END,"
    f" dispatched_at = CASE WHEN {_HOLDABLE} THEN NULL ELSE dispatched_at END,"
    f" status = CASE WHEN {_HOLDABLE} THEN 'WAITING' ELSE status END"
)
_PAUSE_EVENT = (
    "CASE WHEN status = 'WAITING' AND waiting_for = 'pause' THEN 'waiting' ELSE 'pause' END",
    "jsonb_build_object('for', 'pause', 'until', NULL, 'by', paused_by)",
)
# pauseRun: one run of the tenant; a run already held by its own pause is left as it is.
PAUSE = move(
    _PAUSED_SETS,
    "tenant_id = :tenant_id AND (paused_at IS NULL OR paused_by <> 'run')",
    event_type=_PAUSE_EVENT[0],
    event_data=_PAUSE_EVENT[1],
    returns_cap=True,
    lock_first=True,
)
# pauseAgent / `outlive tenant pause`: every active run of the agent (or of the tenant) at once.
_PAUSABLE = (
    f"tenant_id = :tenant_id AND {ACTIVE} AND paused_at IS NULL"
    " AND (CAST(:agent AS text) IS NULL OR agent = :agent)"
)
PAUSE_ALL = prepare(
    text(
        f"""WITH {locked_first(_PAUSABLE)},
        moved AS (
            UPDATE runs SET {_PAUSED_SETS}, {bump()}, updated_at = now()
              FROM locked
             WHERE runs.id = locked.locked_id AND {ACTIVE} AND paused_at IS NULL
            RETURNING runs.*),
        appended AS ({appended(_PAUSE_EVENT)})
        SELECT id, status FROM moved"""
    )
)

# Let go of held runs: WAITING (pause, or a budget's hold when `:over_budget`) → QUEUED, woken
# (`WAKE_HELD`); a marked RUNNING or queued-behind run is unmarked (`UNMARK`). `:which`: 'run'
# (one run, whoever paused it), 'agent' or 'tenant' (the runs that pause held), 'budget' (the
# runs a budget holds).
_LET_GO = (
    "(CAST(:which AS text) = 'run' AND id = :run_id AND (paused_at IS NOT NULL"
    " OR (status = 'WAITING' AND waiting_for = 'version')"
    " OR (status = 'WAITING' AND waiting_for = 'budget' AND :over_budget)))"
    " OR (CAST(:which AS text) = 'budget' AND held_by_budget_id = :budget_id"
    " AND status = 'WAITING' AND waiting_for = 'budget')"
    " OR (CAST(:which AS text) IN ('agent', 'tenant') AND paused_by = :which"
    " AND (CAST(:agent AS text) IS NULL OR agent = :agent))"
)
_BY = "jsonb_build_object('by', CAST(:which AS text), 'overBudget', CAST(:over_budget AS boolean))"
# The held ones wake: QUEUED again, as any wake (`WOKEN_SETS`).
_HELD = (
    f"tenant_id = :tenant_id AND status = 'WAITING' AND ({_LET_GO})"
    " AND (waiting_for IN ('pause', 'version') OR (waiting_for = 'budget'"
    " AND (CAST(:which AS text) = 'budget' OR :over_budget)))"
)
WAKE_HELD = prepare(
    text(
        f"""WITH {locked_first(_HELD)},
        moved AS (
            UPDATE runs SET {WOKEN_SETS}, {bump()}, paused_at = NULL, paused_by = NULL,
                   budget_override = budget_override OR CAST(:over_budget AS boolean)
              FROM locked WHERE runs.id = locked.locked_id AND runs.status = 'WAITING'
            RETURNING runs.*),
        appended AS ({appended(("'resumed'", _BY))})
        SELECT * FROM moved"""
    ).columns(*RUN_COLUMNS)
)
# The marked ones (RUNNING, or QUEUED behind another of their key) are only unmarked.
UNMARK = prepare(
    text(
        f"""WITH moved AS (
            UPDATE runs SET paused_at = NULL, paused_by = NULL, {bump()}, updated_at = now(),
                   budget_override = budget_override OR CAST(:over_budget AS boolean)
             WHERE tenant_id = :tenant_id AND {ACTIVE} AND status <> 'WAITING'
               AND paused_at IS NOT NULL AND ({_LET_GO})
            RETURNING *),
        appended AS ({appended(("'unpaused'", _BY))})
        SELECT * FROM moved"""
    ).columns(*RUN_COLUMNS)
)

# A version hold (contract §7 "Versions", `workflows.versions`): the attempt found that its code
# does not reach the steps the run recorded; the run waits, no timer, for `resumeRun` (after a
# fix is deployed) or `cancelRun`. A `version` event says where and why.
HOLD_VERSION = move(
    "status = 'WAITING', lease_expires_at = NULL, waiting_for = 'version', wake_at = NULL,"
    " wait_id = NULL, waiting_show = NULL",
    "status = 'RUNNING' AND attempt = :attempt AND cancel_requested_at IS NULL",
    event_type="'version'",
    event_data="CAST(:data AS jsonb)",
    returns_cap=True,
)

# A tenant's and an agent's pause (they hold new runs too, at their first step).
PAUSE_TENANT = prepare(
    text(
        "UPDATE tenants SET paused_at = CASE WHEN :paused THEN coalesce(paused_at, now()) END"
        " WHERE slug = :slug RETURNING id, paused_at"
    )
)
PAUSE_AGENT = prepare(
    text(
        "INSERT INTO agent_pauses (tenant_id, agent) VALUES (:tenant_id, :agent)"
        " ON CONFLICT DO NOTHING"
    )
)
RESUME_AGENT = prepare(
    text("DELETE FROM agent_pauses WHERE tenant_id = :tenant_id AND agent = :agent")
)
AGENT_PAUSES = prepare(
    text("SELECT agent, paused_at FROM agent_pauses WHERE tenant_id = :tenant_id")
)
