"""The statements that park a run WAITING, wake it, and mark its hand-off to the queue.

They write `runs` and `run_events`, so they live with the run's other moves (`queries`), built
once at import from constants; every value is a bound parameter. Parking needs the attempt to
still execute the run (`status = 'RUNNING' AND attempt = :attempt`); a wake needs it still
WAITING (for that signal's name). Races (a signal against the timer, against `cancelRun`,
against the wait being registered) are decided by the run's row lock and these predicates.
A wake by a signal also takes the signal from the mailbox and resolves the wait
(`services.waits` owns those rows): in the same statement, so the three cannot disagree.
"""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.services.runs.queries import RUN_COLUMNS, move
from outlive.services.runs.timeline import appended, bump

# RUNNING → WAITING for this attempt, with a `waiting {for, until}` event. The attempt ends; the
# run's slot under its tenant's cap is free (`tenant_max_running` says whether one may be owed).
# A wait that named itself (`wait_id`) has its id and what it shows in the row and the event.
PARK = move(  # a run paused meanwhile parks held by its pause instead (no timer: resumeRun)
    "status = 'WAITING', lease_expires_at = NULL,"
    " waiting_for = CASE WHEN paused_at IS NULL THEN CAST(:waiting_for AS text) ELSE 'pause' END,"
    " wake_at = CASE WHEN paused_at IS NULL THEN CAST(:until AS timestamptz) END,"
    " wait_id = CAST(:wait_id AS text), waiting_show = CAST(:show AS jsonb)",
    "status = 'RUNNING' AND attempt = :attempt AND cancel_requested_at IS NULL",
    event_type="'waiting'",
    event_data="jsonb_build_object('for', waiting_for, 'until', wake_at)"
    " || CASE WHEN wait_id IS NULL THEN '{}'::jsonb ELSE jsonb_build_object('waitId', wait_id,"
    " 'show', coalesce(waiting_show, 'null'::jsonb)) END",
    returns_cap=True,
)

# A woken run: QUEUED again, admitted at once unless its tenant's cap is below the number of
# agents (the INSERT's shortcut: then the dispatch function admits it). Not a retry: `resumes`.
WOKEN_SETS = (
    "status = 'QUEUED', waiting_for = NULL, wake_at = NULL, wait_id = NULL, waiting_show = NULL,"
    " resumes = resumes + 1, held_by_budget_id = NULL,"
    " lease_expires_at = NULL, updated_at = now(), relay_after = now() + interval '10 seconds',"
    " dispatched_at = CASE WHEN coalesce((SELECT t.max_running_runs FROM tenants t"
    " WHERE t.id = runs.tenant_id), :default_cap) >= :agents AND runs.key = '' THEN now() END"
)

# The run waits for this name: the signal is taken by its wait, and the run is woken (QUEUED,
# admitted at once unless its tenant is capped), with `signal` and `resumed {by: signal}`.
# The `signal` event records the payload and who sent it (`by`: the email of the token's user):
# the run's audit trail of its approvals.
_SIGNAL = (
    "'signal'",
    "jsonb_build_object('name', CAST(:name AS text), 'payload', CAST(:payload AS jsonb),"
    " 'by', CAST(:sender AS text))",
)
_RESUMED_BY_SIGNAL = ("'resumed'", """'{"by": "signal"}'::jsonb""")
WAKE_BY_SIGNAL = prepare(
    text(
        f"""WITH moved AS (
            UPDATE runs SET {WOKEN_SETS}, {bump(2)}
             WHERE id = :run_id AND status = 'WAITING' AND waiting_for = :name
            RETURNING *),
        delivered AS (
            UPDATE run_signals SET delivered_at = now()
             WHERE seq = :seq AND EXISTS (SELECT 1 FROM moved) RETURNING seq),
        resolved AS (
            UPDATE run_waits w SET resolved_at = now(), resolved_by = 'signal',
                   payload = CAST(:payload AS jsonb)
              FROM moved WHERE w.run_id = moved.id AND w.resolved_at IS NULL),
        appended AS ({appended(_SIGNAL, _RESUMED_BY_SIGNAL)})
        SELECT moved.* FROM moved"""
    ).columns(*RUN_COLUMNS)
)
# Kept in the mailbox: only the `signal` event (the run's row is locked by the caller).
SIGNAL_EVENT = prepare(
    text(
        f"""WITH moved AS (UPDATE runs SET {bump()} WHERE id = :run_id RETURNING *),
        appended AS ({appended(_SIGNAL)})
        SELECT moved.* FROM moved"""
    ).columns(*RUN_COLUMNS)
)

# WAITING runs whose sleep or signal timeout is due, a batch at a time (the relay's timers). A
# durable sleep (`waiting_for` NULL) is due `:lead` seconds early: its run is handed back ahead
# and the attempt that claims it finishes the sleep in-process, at `until` (`services.waits`). A
# signal's timeout is never early: a signal may still come until then.
# A run held by a day's or a month's budget is woken by its next period (`period`), and
# resolves no wait of its own (it was held at a step, not in a wait).
_BY = (
    "CASE WHEN waited_for IS NULL THEN 'timer' WHEN waited_for = 'budget' THEN 'period'"
    " ELSE 'timeout' END"
)
WAKE_DUE = prepare(
    text(
        f"""WITH due AS (
            SELECT id, waiting_for, wake_at FROM runs
             WHERE status = 'WAITING' AND wake_at <= now() + make_interval(secs => :lead)
               AND (waiting_for IS NULL OR wake_at <= now())
             ORDER BY wake_at LIMIT :batch FOR UPDATE SKIP LOCKED),
        moved AS (
            UPDATE runs SET {WOKEN_SETS}, {bump()} FROM due
             WHERE runs.id = due.id AND runs.status = 'WAITING'
            RETURNING runs.id, runs.tenant_id, runs.event_seq, runs.dispatched_at,
                      due.waiting_for AS waited_for, due.wake_at AS was_due),
        resolved AS (
            UPDATE run_waits w SET resolved_at = now(), resolved_by = {_BY}
              FROM moved WHERE w.run_id = moved.id AND w.resolved_at IS NULL
               AND moved.waited_for IS DISTINCT FROM 'budget'),
        appended AS ({appended(("'resumed'", f"jsonb_build_object('by', {_BY})"))})
        SELECT id, tenant_id, dispatched_at IS NOT NULL AS admitted,
               extract(epoch FROM clock_timestamp() - was_due) AS late_s FROM moved"""
    )
)

# --- the hand-off marks (`services.relay`) ------------------------------------------------------

# The queue could not take these runs: still QUEUED (admitted), due for the relay now, and
# `handoff_failed_at` says so (`waitingReason`).
HANDOFF_FAILED = prepare(
    text(
        "UPDATE runs SET relay_after = now(), handoff_failed_at = now()"
        " WHERE id = ANY(:ids) AND status = 'QUEUED' AND dispatched_at IS NOT NULL RETURNING *"
    )
)
# The relay handed runs whose hand-off had failed.
HANDED = prepare(
    text(
        "UPDATE runs SET handoff_failed_at = NULL"
        " WHERE id = ANY(:ids) AND handoff_failed_at IS NOT NULL RETURNING id"
    )
)


# The fake clock of `outlive.testing`: the timers of a tenant's ($2) WAITING runs moved back by
# $1 (an interval), as if that much time had passed; the relay then wakes those now due.
SKIP_TIMERS = (
    "UPDATE runs SET wake_at = wake_at - CAST($1 AS interval)"
    " WHERE tenant_id = $2 AND status = 'WAITING' AND wake_at IS NOT NULL"
)
