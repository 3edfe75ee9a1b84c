"""The relay's statements, assembled from the constants here only (values are bound)."""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.liveness import ORPHANED_RUNS
from outlive.db.models import WAITING_SQL
from outlive.db.raw import prepare
from outlive.services import outbox

CHANNEL = "outlive_relay"  # NOTIFY'd by a trigger whenever a row becomes due now
FIRST_LOOK_S = 10.0  # `RELAY_FIRST_LOOK` of the models: a waiting row this old missed a dispatch
RETRY_S = 1.0  # a row whose hand-off failed is due again this much later
MAX_TENANTS = 100  # tenants whose missed dispatch one scan makes up for
CHUNK = 50  # enqueues sent at once (saq's own limit is 50 operations in flight per queue)
QUEUE_TIMEOUT_S = 10.0  # the relay's enqueues are off the request path: a longer deadline
WINDOW = 4  # a pass looks at this many times its batch of the oldest due rows, for fairness

# (kind, table, the status whose admitted rows are handed): runs, then the outbox's kinds (its
# registry, `services.outbox.KINDS`). Literal values in the SQL: the partial indexes.
KINDS = (
    ("run", "runs", "QUEUED"),
    *((k.kind, k.table, outbox.PENDING) for k in outbox.KINDS),
)
RUN_TABLE = "runs"
WAITING_FOR_QUEUE = (
    "waiting for the queue: it could not be reached when the run was started; the run is handed"
    " to it as soon as it is back"
)


def _take(kind: str, table: str, status: str) -> str:
    failed = "u.handoff_failed_at IS NOT NULL" if table == RUN_TABLE else "false"
    return f"""
    {kind}_due AS (
        SELECT id, tenant_id, relay_after FROM {table}
         WHERE status = '{status}' AND dispatched_at IS NOT NULL AND relay_after <= now()
         ORDER BY relay_after LIMIT :window),
    {kind}_fair AS (
        SELECT id FROM (SELECT id, relay_after, row_number() OVER (
                               PARTITION BY tenant_id ORDER BY relay_after) AS turn
                          FROM {kind}_due) d
         ORDER BY turn, relay_after LIMIT :batch),
    {kind}_locked AS (
        SELECT t.id FROM {table} t JOIN {kind}_fair f ON f.id = t.id
         WHERE t.status = '{status}' AND t.dispatched_at IS NOT NULL AND t.relay_after <= now()
         FOR UPDATE OF t SKIP LOCKED),
    {kind}_taken AS (
        UPDATE {table} u SET relay_after = now() + make_interval(secs => :recheck)
          FROM {kind}_locked l WHERE u.id = l.id
        RETURNING '{kind}'::text AS kind, u.id, {failed} AS failed)"""


TAKE = prepare(
    text(
        "WITH"
        + ",".join(_take(*k) for k in KINDS)
        + "\n"
        + " UNION ALL ".join(f"SELECT kind, id, failed FROM {k}_taken" for k, _, _ in KINDS)
    )
)

_MARK_DUE = ",".join(
    f"""
    {kind}_due AS (UPDATE {table} SET relay_after = now()
                    WHERE status = '{status}' AND dispatched_at IS NOT NULL
                      AND relay_after > now() RETURNING 1)"""
    for kind, table, status in KINDS
)
MARK_ALL_DUE = prepare(
    text(
        f"WITH {_MARK_DUE}\nSELECT "
        + " + ".join(f"(SELECT count(*) FROM {k}_due)" for k, _, _ in KINDS)
        + " AS n"
    )
)

JOBS_HANDOFF_FAILED = {
    kind: prepare(
        text(
            f"UPDATE {table} SET relay_after = now()"
            f" WHERE id = ANY(:ids) AND status = '{status}' RETURNING id"
        )
    )
    for kind, table, status in KINDS[1:]
}
RETRY_LATER = {
    kind: prepare(
        text(
            f"UPDATE {table} SET relay_after = now() + make_interval(secs => :delay)"
            f" WHERE id = ANY(:ids) AND status = '{status}' RETURNING id"
        )
    )
    for kind, table, status in KINDS
}
RUNNING_RUNS = prepare(text("SELECT id FROM runs WHERE status = 'RUNNING'"))
# RUNNING runs whose worker process is gone (`db.liveness.ORPHANED_RUNS`).
ORPHANED = prepare(text(f"SELECT id FROM runs WHERE {ORPHANED_RUNS} ORDER BY id LIMIT :batch"))


# A run QUEUED behind another run of its key waits for its turn, not for a slot (`ix_runs_waiting`).
_IN_LINE = {"runs": " AND queued_behind_id IS NULL"}


def _loose_scan(name: str, table: str, status: str) -> str:
    """The distinct tenants of a table's waiting rows: one index probe per tenant."""
    waiting = f"status = '{status}' AND dispatched_at IS NULL" + _IN_LINE.get(table, "")
    return f"""
    {name} AS (
        (SELECT tenant_id FROM {table} WHERE {waiting} ORDER BY tenant_id LIMIT 1)
        UNION ALL
        SELECT (SELECT x.tenant_id FROM {table} x WHERE x.{waiting.replace(" AND ", " AND x.")}
                   AND x.tenant_id > {name}.tenant_id ORDER BY x.tenant_id LIMIT 1)
          FROM {name} WHERE {name}.tenant_id IS NOT NULL)"""


def _oldest_waiting(table: str, status: str) -> str:
    return (
        f"(SELECT min(x.created_at) FROM {table} x WHERE x.tenant_id = w.tenant_id"
        f" AND x.status = '{status}' AND x.dispatched_at IS NULL"
        + _IN_LINE.get(table, "").replace(" AND ", " AND x.")
        + ")"
    )


def _admitted(table: str, statuses: str) -> str:
    return (
        f"(SELECT count(*) FROM {table} x WHERE x.tenant_id = w.tenant_id"
        f" AND x.status IN ({statuses}) AND x.dispatched_at IS NOT NULL)"
    )


# Tenants with a run that waits for a slot since longer than the first look while a slot is free.
MISSED_RUN_DISPATCHES = prepare(
    text(
        "WITH RECURSIVE"
        + _loose_scan("waiting", "runs", "QUEUED")
        + f"""
        SELECT w.tenant_id FROM waiting w JOIN tenants t ON t.id = w.tenant_id
         WHERE {_oldest_waiting("runs", "QUEUED")} < now() - make_interval(secs => :stale)
           AND {_admitted("runs", "'QUEUED', 'RUNNING'")}
               < coalesce(t.max_running_runs, :default_cap)
         LIMIT :tenants"""
    )
)
# Tenants with an outbox row (of any kind) that waits for a slot since longer than the first look
# while a slot of the jobs cap is free.
_OUTBOX = [(k.kind, k.table) for k in outbox.KINDS]
MISSED_JOB_DISPATCHES = prepare(
    text(
        "WITH RECURSIVE"
        + ",".join(_loose_scan(f"{kind}_waiting", table, outbox.PENDING) for kind, table in _OUTBOX)
        + ",\n        waiting AS ("
        + " UNION ".join(
            f"SELECT tenant_id FROM {kind}_waiting WHERE tenant_id IS NOT NULL"
            for kind, _ in _OUTBOX
        )
        + ")"
        + f"""
        SELECT w.tenant_id FROM waiting w JOIN tenants t ON t.id = w.tenant_id
         WHERE least({", ".join(_oldest_waiting(table, outbox.PENDING) for _, table in _OUTBOX)})
               < now() - make_interval(secs => :stale)
           AND {" + ".join(_admitted(table, f"'{outbox.PENDING}'") for _, table in _OUTBOX)}
               < coalesce(t.max_inflight_jobs, :default_cap)
         LIMIT :tenants"""
    )
)


# --- timers: WAITING runs whose sleep or signal timeout is due -----------------------------------

# (waking them is the run's own move: `services.runs.wake_due`)
# The earliest timer, one probe of `ix_runs_wake`: a durable sleep's is due `:lead` early
# (`runs.wake_due`), a signal's timeout on time. (A sleep due within the lead after an earlier
# timeout is handed back with that timeout's pass: ahead still, by less than the lead. Looking
# for the earliest sleep and the earliest timeout apart scanned the whole index when there was
# no timeout at all, on every pass.)
_NEXT_WAKE = (
    "SELECT extract(epoch FROM wake_at - now() - CASE WHEN waiting_for IS NULL"
    " THEN make_interval(secs => :lead) ELSE interval '0' END)"
    " FROM runs WHERE status = 'WAITING' ORDER BY wake_at LIMIT 1"
)


# --- the clock: schedules (`services.schedules.fires`) and debounced runs -----------------------

# How long until the clock has something to do: the earliest schedule (its fire time read on the
# schedules' time, `:ahead_s` ahead of PostgreSQL's: `db.ports.TimeSource`), or the earliest
# debounced run still held back (one probe of `ix_schedules_due` and one of `ix_runs_not_before`).
_NEXT_FIRE = (
    "(SELECT next_fire_at - make_interval(secs => :ahead_s) FROM schedules"
    " WHERE next_fire_at IS NOT NULL ORDER BY next_fire_at LIMIT 1)"
)


def _next_hold(ahead: str = "") -> str:
    """The earliest `not_before` of a debounced run not yet let in (`ix_runs_not_before`)."""
    return (
        f"(SELECT not_before FROM runs WHERE {WAITING_SQL} AND not_before IS NOT NULL{ahead}"
        " ORDER BY not_before LIMIT 1)"
    )


_NEXT_CLOCK = (
    f"extract(epoch FROM least({_NEXT_FIRE}, {_next_hold(' AND not_before > now()')}) - now())"
)
# Both in one round trip, at the end of a pass that did anything (NULL: nothing to wait for).
NEXT = prepare(text(f"SELECT ({_NEXT_WAKE}) AS wake_s, {_NEXT_CLOCK} AS clock_s"))

# --- the pass's first look: which of its parts have anything to do ------------------------------

# One round trip, one index probe per part, at the start of every pass (`Relay.run_pass`): the
# seconds until the earliest handed row is due again (`ix_*_relay`), whether any row waits for
# admission at all (the missed-dispatch scan's tenants are among those), the next timer and
# fire time as `NEXT` reads them, and the earliest hold, ended or not. A part whose figure is
# not yet due is skipped: an idle pass is this statement, not nine round trips (bench/cells.py:
# every cell's relay paid them every 2 s). Conservative by construction: each figure is the
# minimum over the rows its part's own statement would consider.
_WAITING_ANY = " OR ".join(
    f"EXISTS (SELECT 1 FROM {table} WHERE status = '{status}' AND dispatched_at IS NULL"
    + _IN_LINE.get(table, "")
    + ")"
    for _, table, status in KINDS
)
_NEXT_DUE = ", ".join(
    f"(SELECT relay_after FROM {table} WHERE status = '{status}' AND dispatched_at IS NOT NULL"
    " ORDER BY relay_after LIMIT 1)"
    for _, table, status in KINDS
)
LOOK = prepare(
    text(
        f"SELECT extract(epoch FROM least({_NEXT_DUE}) - now()) AS due_s,"
        f" ({_WAITING_ANY}) AS waiting, ({_NEXT_WAKE}) AS wake_s,"
        f" extract(epoch FROM {_NEXT_FIRE} - now()) AS fire_s,"
        f" extract(epoch FROM {_next_hold()} - now()) AS hold_s"
    )
)

# Tenants with a debounced run whose hold ended, while a slot of their cap is free (a full one
# is dispatched by the settle that frees a slot).
HOLDS_ENDED = prepare(
    text(
        """SELECT DISTINCT w.tenant_id FROM runs w JOIN tenants t ON t.id = w.tenant_id
         WHERE w.status = 'QUEUED' AND w.dispatched_at IS NULL AND w.queued_behind_id IS NULL
           AND w.not_before IS NOT NULL AND w.not_before <= now()
           AND (SELECT count(*) FROM runs x WHERE x.tenant_id = w.tenant_id
                 AND x.status IN ('QUEUED', 'RUNNING') AND x.dispatched_at IS NOT NULL)
               < coalesce(t.max_running_runs, :default_cap)
         LIMIT :tenants"""
    )
)
