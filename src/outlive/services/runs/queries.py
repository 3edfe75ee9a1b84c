"""Every statement of the runs slice, built once at import: prepared `Statement` constants.

Every statement that moves a run (`Move`) carries the active-status predicate (`ACTIVE`), with
literal values, never bind parameters: the planner must see that it implies the partial unique
index's predicate (for ON CONFLICT and for using the index), including in the generic plans of
prepared statements. Writes made on behalf of one attempt also carry `attempt = :attempt`, the
fencing token.

Timeline events are appended in the same statement that bumps `runs.event_seq` (a data-modifying
CTE), which keeps `seq` gap-free under concurrent emitters and makes "settle + its timeline event"
one atomic write. The SQL below is assembled from this module's constants only, at import; every
value is a bound parameter.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlalchemy import ARRAY, Uuid, bindparam, column, text

from outlive.db.liveness import worker_gone
from outlive.db.models import ACTIVE_SQL, HEAD_SQL, WAITING_SQL, Run, RunEvent
from outlive.db.raw import Statement, prepare
from outlive.services.runs.timeline import appended, bump
from outlive.services.webhooks.queries import SETTLED_DELIVERIES_CTE

ACTIVE = ACTIVE_SQL  # QUEUED, RUNNING or WAITING: the partial unique index's predicate
RUN_COLUMNS = tuple(Run.__table__.c)
LEASE_EXPIRED = "coalesce(lease_expires_at, '-infinity') < now()"
WORKER_GONE = worker_gone("runs.worker_id")  # the holder's process ended (its session did)
# The lease of the attempt holding a RUNNING run, extended by its heartbeats and its events.
LEASE = "lease_expires_at = now() + make_interval(secs => :lease), heartbeat_at = now()"

# --- starting and reading ---------------------------------------------------------------------

# Admitted at once when its tenant's cap is at least the number of agents and it has the agent's
# default key (at most one such run per agent is active then, so the cap holds); otherwise written
# waiting for a dispatch. ON CONFLICT with no target: the key's head (`uq_runs_one_active_per_key`)
# and the tenant's idempotency key (`uq_runs_idempotency_key`) are both arbiters.
_INSERT_COLUMNS = (
    "tenant_id, agent, key, on_conflict, tags, idempotency_key, input, retried_from_id,"
    " schedule_id, scheduled_for, priority, not_before, debounce_until,"
    " queued_behind_id, dispatched_at"
)
# A debounced start (`:debounce_s` not NULL) is held back `:debounce_s`, never past its first
# start + `:debounce_max_s` (NULL: no bound, 'infinity').
_INSERT_VALUES = (
    ":tenant_id, :agent, CAST(:key AS text), :on_conflict, CAST(:tags AS text[]), :idempotency_key,"
    " CAST(:input AS jsonb), :retried_from_id, CAST(:schedule_id AS uuid),"
    " CAST(:scheduled_for AS timestamptz), :priority,"
    " now() + make_interval(secs => CAST(:debounce_s AS float8)),"
    " CASE WHEN CAST(:debounce_s AS float8) IS NOT NULL THEN coalesce("
    "now() + make_interval(secs => CAST(:debounce_max_s AS float8)), 'infinity') END"
)
INSERT_RUN = prepare(
    text(
        f"INSERT INTO runs ({_INSERT_COLUMNS}) VALUES ({_INSERT_VALUES}, NULL, CASE WHEN coalesce("
        "(SELECT max_running_runs FROM tenants WHERE id = :tenant_id), :default_cap) >= :agents"
        " AND CAST(:key AS text) = '' THEN now() END)"
        " ON CONFLICT DO NOTHING RETURNING *"
    ).columns(*RUN_COLUMNS)
)
# Many starts of one tenant in one statement (the schedules' clock): `:batch` a JSON array of
# {agent, key, on_conflict, tags, input, schedule_id, scheduled_for, priority}, inserted in its
# order; a start whose key already has an active run (or an earlier one of the batch) is left out
# (ON CONFLICT DO NOTHING) for the caller to start one by one under its strategy.
INSERT_RUNS = prepare(
    text(
        f"INSERT INTO runs ({_INSERT_COLUMNS})"
        " SELECT :tenant_id, b.r->>'agent', b.r->>'key', b.r->>'on_conflict',"
        " ARRAY(SELECT jsonb_array_elements_text(b.r->'tags')), NULL, b.r->'input', NULL,"
        " CAST(b.r->>'schedule_id' AS uuid), CAST(b.r->>'scheduled_for' AS timestamptz),"
        " CAST(b.r->>'priority' AS smallint), NULL, NULL, NULL,"
        " CASE WHEN coalesce((SELECT max_running_runs FROM tenants WHERE id = :tenant_id),"
        " :default_cap) >= :agents AND b.r->>'key' = '' THEN now() END"
        " FROM jsonb_array_elements(CAST(:batch AS jsonb)) WITH ORDINALITY AS b(r, n)"
        " ORDER BY b.n ON CONFLICT DO NOTHING RETURNING *"
    ).columns(*RUN_COLUMNS)
)
# The head of a key's line: its active run.
ACTIVE_RUN = prepare(
    text(
        "SELECT * FROM runs WHERE tenant_id = :tenant_id AND agent = :agent AND key = :key"
        f" AND {HEAD_SQL}"
    ).columns(*RUN_COLUMNS)
)
# A key's line, head first: the head and the chain of runs QUEUED behind it.
_LINE = f"""line AS (
    SELECT id, 1 AS pos FROM runs
     WHERE tenant_id = :tenant_id AND agent = :agent AND key = :key AND {HEAD_SQL}
    UNION ALL
    SELECT r.id, line.pos + 1 FROM runs r JOIN line ON r.queued_behind_id = line.id
     WHERE r.status = 'QUEUED')"""
LINE = prepare(text(f"WITH RECURSIVE {_LINE} SELECT id FROM line ORDER BY pos"))
# Join the end of a key's line (ENQUEUE). The tail is locked FOR SHARE until the commit, so it
# cannot settle before this run is behind it (its settle's trigger then moves the line on); a
# tail that settled first matches nothing, and a run that got behind it first is a conflict
# (`uq_runs_queued_behind`): either way nothing is written and the caller looks again.
INSERT_BEHIND = prepare(
    text(
        f"""WITH RECURSIVE {_LINE},
        tail AS (SELECT r.id FROM runs r
                  WHERE r.id = (SELECT id FROM line ORDER BY pos DESC LIMIT 1) AND {ACTIVE}
                  FOR SHARE)
        INSERT INTO runs ({_INSERT_COLUMNS})
        SELECT {_INSERT_VALUES}, tail.id, NULL FROM tail
        ON CONFLICT DO NOTHING RETURNING *"""
    ).columns(*RUN_COLUMNS)
)
# Line changes of one key (ENQUEUE, CANCEL_PREVIOUS) take turns, for the rest of the transaction.
LOCK_KEY = prepare(
    text(
        "SELECT pg_advisory_xact_lock(hashtextextended("
        "CAST(CAST(:tenant_id AS uuid) AS text) || '/' || :agent || '/' || :key, 7))"
        " IS NULL AS locked"
    )
)
# Debounce (contract §7): the key's run that was started with `debounce` and is still held back
# (QUEUED, not admitted, never started) takes the new input, and its hold moves to now +
# `:debounce_s`, never past its `debounce_until`. Starts of one key take turns (`LOCK_KEY`).
DEBOUNCE = prepare(
    text(
        "UPDATE runs SET input = CAST(:input AS jsonb), updated_at = now(),"
        " not_before = least(now() + make_interval(secs => CAST(:debounce_s AS float8)),"
        " debounce_until)"
        " WHERE id = (SELECT id FROM runs WHERE tenant_id = :tenant_id AND agent = :agent"
        "   AND key = CAST(:key AS text) AND status = 'QUEUED' AND dispatched_at IS NULL"
        "   AND started_at IS NULL AND debounce_until IS NOT NULL"
        "   ORDER BY created_at DESC, id DESC LIMIT 1)"
        " AND status = 'QUEUED' AND dispatched_at IS NULL AND started_at IS NULL RETURNING *"
    ).columns(*RUN_COLUMNS)
)
# The relay's clock learns of a new hold at once (it sleeps until the earliest one).
NOTIFY_CLOCK = prepare(text("SELECT 1 AS n FROM pg_notify('outlive_relay', 'runs')"))
BY_IDEMPOTENCY_KEY = prepare(
    text(
        "SELECT *, created_at > now() - interval '24 hours' AS fresh FROM runs"
        " WHERE tenant_id = :tenant_id AND idempotency_key = :idempotency_key"
    ).columns(*RUN_COLUMNS, column("fresh"))
)
# An idempotency key older than 24 h no longer names its run: the next start takes it over.
EXPIRE_IDEMPOTENCY_KEY = prepare(
    text(
        "UPDATE runs SET idempotency_key = NULL WHERE tenant_id = :tenant_id"
        " AND idempotency_key = :idempotency_key AND created_at <= now() - interval '24 hours'"
        " RETURNING id"
    )
)
GET_RUN = prepare(
    text("SELECT * FROM runs WHERE id = :run_id AND tenant_id = :tenant_id").columns(*RUN_COLUMNS)
)
LEASE_LEFT = prepare(
    text(
        "SELECT status, dispatched_at, agent,"
        " extract(epoch FROM lease_expires_at - now()) AS left_s FROM runs WHERE id = :run_id"
    )
)


EVENTS = prepare(
    text(
        "SELECT seq, type, data, at FROM run_events WHERE run_id = :run_id AND seq > :after"
        " ORDER BY seq LIMIT :first"
    ).columns(RunEvent.seq, RunEvent.type, RunEvent.data, RunEvent.at)
)
# Each run's events in one statement, however many runs (`services.timelines`).
EVENTS_OF_RUNS = prepare(
    text(
        "SELECT e.run_id, e.seq, e.type, e.data, e.at"
        " FROM unnest(:run_ids) AS r(id)"
        " CROSS JOIN LATERAL (SELECT run_id, seq, type, data, at FROM run_events"
        "   WHERE run_id = r.id AND seq > :after ORDER BY seq LIMIT :first) e"
    )
    .bindparams(bindparam("run_ids", type_=ARRAY(Uuid())))
    .columns(RunEvent.run_id, RunEvent.seq, RunEvent.type, RunEvent.data, RunEvent.at)
)

# --- moving a run: every write below carries the predicate -------------------------------------


# A settle may let a run in: its successor in its key's line (which the settle's trigger makes
# the head), or a run of its tenant waiting for a slot. (The statement's snapshot predates the
# trigger's write, so the successor is still seen behind the settled run.)
_MAY_ADMIT = (
    "(EXISTS (SELECT 1 FROM runs b WHERE b.queued_behind_id = moved.id AND b.status = 'QUEUED')"
    f" OR EXISTS (SELECT 1 FROM runs w WHERE w.tenant_id = moved.tenant_id AND {WAITING_SQL}))"
)


def locked_first(where: str) -> str:
    """The CTE `locked` (`locked_id`): the runs `where` picks, locked before the statement
    computes what it writes; an UPDATE joins it (`FROM locked WHERE runs.id = locked.locked_id`),
    so a `clock_timestamp()` in its SET follows any transaction that held the row (alone, an
    UPDATE computes its new row, then waits on a lock-only holder and writes what it computed)."""
    return f"locked AS (SELECT id AS locked_id FROM runs WHERE {where} FOR UPDATE)"


@dataclass(frozen=True)
class Move:
    """A conditional UPDATE of one run and its timeline event, as one prepared statement (built
    by `move`, at import). `changes_run`: the run's visible state changes (nudge `run.updated`);
    `may_settle`: it can settle the run, so it also writes the settle's webhook deliveries and
    returns `delivery_ids`, `tenant_max_running`, `may_admit` and `live_children` (it has
    children that its settle or cancel must cancel: `services.runs.children`)."""

    statement: Statement
    changes_run: bool
    may_settle: bool


def move(
    sets: str,
    where: str = "",
    *,
    event_type: str = ":type",
    event_data: str = "CAST(:data AS jsonb)",
    changes_run: bool = True,
    may_settle: bool = False,
    returns_cap: bool = False,
    lock_first: bool = False,
) -> Move:
    """`sets` and `where` are SQL over `runs`; `event_type` and `event_data` SQL over the updated
    row; `returns_cap`: it also returns `tenant_max_running`. The statement always carries
    `id = :run_id AND status IN ('QUEUED', 'RUNNING', 'WAITING')`. `lock_first`: the row is
    locked before `sets` is computed (`locked_first`)."""
    sets = ", ".join(p for p in (sets, f"{bump()}, updated_at = now()") if p)
    where = f"id = :run_id AND {ACTIVE}" + (f" AND {where}" if where else "")
    deliveries, delivery_ids, columns = "", "", RUN_COLUMNS
    if may_settle:
        deliveries = f",\n{SETTLED_DELIVERIES_CTE}"
        delivery_ids = (
            ", ARRAY(SELECT id FROM delivered) AS delivery_ids, (SELECT max_running_runs"
            " FROM tenants WHERE id = moved.tenant_id) AS tenant_max_running, "
            f"{_MAY_ADMIT} AS may_admit,"
            " EXISTS (SELECT 1 FROM runs c WHERE c.parent_id = moved.id AND c.status IN"
            " ('QUEUED', 'RUNNING', 'WAITING') AND NOT c.abandon_with_parent) AS live_children"
        )
        columns = (
            *RUN_COLUMNS,
            column("delivery_ids"),
            column("tenant_max_running"),
            column("may_admit"),
            column("live_children"),
        )
    elif returns_cap:  # the run frees its slot: whether one may be owed to a waiting run
        delivery_ids = (
            ", (SELECT max_running_runs FROM tenants WHERE id = moved.tenant_id)"
            " AS tenant_max_running"
        )
        columns = (*RUN_COLUMNS, column("tenant_max_running"))
    update = f"UPDATE runs SET {sets} WHERE {where} RETURNING *"
    if lock_first:
        update = (
            f"WITH {locked_first('id = :run_id')} UPDATE runs SET {sets} FROM locked"
            f" WHERE runs.id = locked.locked_id AND {where} RETURNING runs.*"
        )
    sql = f"""WITH moved AS ({update}),
        appended AS ({appended((event_type, event_data))})
        {deliveries}
        SELECT moved.*{delivery_ids} FROM moved"""
    return Move(prepare(text(sql).columns(*columns)), changes_run, may_settle)


_SETTLE = (
    "status = :status, output = CAST(:output AS jsonb), error = :error, finished_at = now(), "
    "lease_expires_at = NULL"
)
_LOST_LONG_AGO = (
    "status = 'RUNNING' AND attempt = :attempt"
    " AND coalesce(lease_expires_at, '-infinity') < now() - make_interval(secs => :grace)"
)
_SETTLED_EVENT = "lower(status)"
SETTLE = move(_SETTLE, event_type=_SETTLED_EVENT, may_settle=True)
# An attempt's own settle: only while it executes (a parked attempt has ended: see `waits`).
SETTLE_ATTEMPT = move(
    _SETTLE,
    "status = 'RUNNING' AND attempt = :attempt",
    event_type=_SETTLED_EVENT,
    may_settle=True,
)
# An attempt's success: a cancel requested before it (`cancel_requested_at`, however late in the
# last step) wins, and the run settles CANCELLED, with no output, in the same statement.
_UNCANCELLED = "cancel_requested_at IS NULL"
SETTLE_SUCCESS = move(
    f"status = CASE WHEN {_UNCANCELLED} THEN :status ELSE 'CANCELLED' END, "
    f"output = CASE WHEN {_UNCANCELLED} THEN CAST(:output AS jsonb) END, error = :error, "
    "finished_at = now(), lease_expires_at = NULL",
    "status = 'RUNNING' AND attempt = :attempt",
    event_type=_SETTLED_EVENT,
    may_settle=True,
)
SETTLE_STALE = move(  # an instance lost (reconcile): never a run whose attempt is alive
    _SETTLE,
    "updated_at < now() - make_interval(secs => :grace)"
    f" AND (status = 'QUEUED' OR (status = 'RUNNING' AND {LEASE_EXPIRED}))",
    event_type=_SETTLED_EVENT,
    may_settle=True,
)
SETTLE_LOST = move(_SETTLE, _LOST_LONG_AGO, event_type=_SETTLED_EVENT, may_settle=True)
LOST = move(  # a worker lost long ago (reconcile): back to QUEUED, the attempt counted as lost
    "status = 'QUEUED', lease_expires_at = NULL, lost_attempts = lost_attempts + 1",
    _LOST_LONG_AGO,
    event_type="'lost'",
)
# QUEUED and WAITING (no attempt executes it) settle CANCELLED at once; RUNNING is asked to stop.
_IDLE = "status IN ('QUEUED', 'WAITING')"
CANCEL = move(
    f"status = CASE WHEN {_IDLE} THEN 'CANCELLED' ELSE status END, "
    f"finished_at = CASE WHEN {_IDLE} THEN now() ELSE finished_at END, "
    "cancel_requested_at = coalesce(cancel_requested_at, now())",
    f"tenant_id = :tenant_id AND ({_IDLE} OR cancel_requested_at IS NULL)",
    event_type="CASE WHEN status = 'CANCELLED' THEN 'cancelled' ELSE 'cancel_requested' END",
    # who asked (`cancelRun`: the token's user) and why, when said; `{}` for the engine's own
    event_data="jsonb_strip_nulls(jsonb_build_object('by', CAST(:by AS text),"
    " 'reason', CAST(:reason AS text)))",
    may_settle=True,  # a QUEUED run settles CANCELLED at once
)
APPEND = move(LEASE, "status = 'RUNNING' AND attempt = :attempt", changes_run=False)
REQUEUE = move(
    "status = 'QUEUED', lease_expires_at = NULL", "status = 'RUNNING' AND attempt = :attempt"
)
RELEASE = move(
    "status = 'QUEUED', attempt = attempt - 1, lease_expires_at = NULL",
    "status = 'RUNNING' AND attempt = :attempt",
)

# The claim: QUEUED, or RUNNING with an expired lease or whose worker process is gone (its
# liveness lock is free: `outlive.db.liveness`; checked last, so only for a live lease). It
# records the claimer's liveness key (`:worker_id`, NULL without one). `prior` locks the row
# first, so `was` is the status the UPDATE really replaced, also when a concurrent claim won and
# the UPDATE re-checks its predicate on the newer row. Taking over a lost attempt counts it and
# writes `lost` just before `claimed`, in the same statement.
_LOST_REASON = "its worker stopped heartbeating and the lease expired"
_GONE_REASON = "its worker process ended"
# A child is never claimed once its parent or its root settled or was asked to stop (unless it
# was started abandoned): the cascade that cancels it may still be on its way down the tree.
_PARENT_LIVE = (
    "(runs.parent_id IS NULL OR runs.abandon_with_parent OR NOT EXISTS (SELECT 1 FROM runs p"
    " WHERE p.id IN (runs.parent_id, runs.root_id)"
    " AND (p.status NOT IN ('QUEUED', 'RUNNING', 'WAITING') OR p.cancel_requested_at IS NOT NULL)))"
)
_CLAIM_EVENTS = appended(
    (
        "'lost'",
        "jsonb_build_object('attempt', attempt - 1, 'reason', CASE WHEN expired"
        f" THEN '{_LOST_REASON}' ELSE '{_GONE_REASON}' END)",
        "was = 'RUNNING'",
    ),
    ("'claimed'", "jsonb_build_object('attempt', attempt)"),
)
CLAIM = prepare(
    text(
        f"""WITH prior AS (SELECT id, status AS was, {LEASE_EXPIRED} AS expired
                         FROM runs WHERE id = :run_id FOR UPDATE),
        moved AS (
            UPDATE runs SET status = 'RUNNING', attempt = attempt + 1,
                started_at = coalesce(started_at, now()), {LEASE}, worker_id = :worker_id,
                code_version = coalesce(runs.code_version,
                                        CAST(:versions AS jsonb) ->> runs.agent),
                lost_attempts = lost_attempts + CAST(prior.was = 'RUNNING' AS int),
                {bump("1 + CAST(prior.was = 'RUNNING' AS int)")}, updated_at = now()
            FROM prior
            WHERE runs.id = prior.id
              AND ((runs.status = 'QUEUED' AND runs.dispatched_at IS NOT NULL)
                   OR (runs.status = 'RUNNING' AND {LEASE_EXPIRED})
                   OR (runs.status = 'RUNNING' AND {WORKER_GONE}))
              AND {_PARENT_LIVE}
            RETURNING runs.*, prior.was, prior.expired),
        appended AS ({_CLAIM_EVENTS})
        SELECT moved.* FROM moved"""
    ).columns(*RUN_COLUMNS, column("was"), column("expired"))
)
# The lost attempts that count towards `MAX_LOST_ATTEMPTS`: those that completed no step since
# their claim (CONTRACT §7: a run that makes progress is never failed for losing workers). The
# attempts lost so far are named by the `lost` events; `:attempt` (when not NULL) is one about to
# be counted lost (reconcile). `run_steps.attempt` is the attempt that recorded the step; a child
# started is a step of its parent too (keyed by step name and occurrence like one), named by its
# `child_started` event's `attempt`: a parent that keeps starting children makes progress.
BARREN_LOSSES = prepare(
    text(
        "SELECT count(*) AS barren FROM ("
        "  SELECT CAST(data->>'attempt' AS int) AS attempt FROM run_events"
        "  WHERE run_id = :run_id AND type = 'lost'"
        "  UNION SELECT CAST(:attempt AS int) WHERE CAST(:attempt AS int) IS NOT NULL) lost"
        " WHERE NOT EXISTS (SELECT 1 FROM run_steps s"
        "   WHERE s.run_id = :run_id AND s.attempt = lost.attempt)"
        " AND NOT EXISTS (SELECT 1 FROM run_events e WHERE e.run_id = :run_id"
        "   AND e.type = 'child_started' AND CAST(e.data->>'attempt' AS int) = lost.attempt)"
    )
)
# A heartbeat: the attempt still holds the run; its lease is extended. No event, no nudge.
HEARTBEAT = prepare(
    text(
        f"UPDATE runs SET {LEASE} WHERE id = :run_id AND status = 'RUNNING'"
        " AND attempt = :attempt RETURNING cancel_requested_at"
    )
)
