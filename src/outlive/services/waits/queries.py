"""Every statement of the waits slice: the wait records (`run_waits`) and the mailbox
(`run_signals`), and the run's row lock they are ordered by. The statements that move the run
(park it WAITING, wake it by a signal, append the `signal` event) are the run's own, in
`services.runs.wake_queries`. Races (a signal against the timer, against `cancelRun`, against
the wait being registered) are decided by the run's row lock and the moves' predicates, never
by a read followed by a write. The SQL is assembled from constants only.
"""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.models import Run
from outlive.db.raw import prepare

RUN_COLUMNS = tuple(Run.__table__.c)

# The attempt still executes the run: its row, locked until the commit (a signal to this run
# waits for it, so it either lands in the mailbox before the wait looks, or finds it WAITING).
LOCK_ATTEMPT = prepare(
    text(
        "SELECT cancel_requested_at FROM runs WHERE id = :run_id AND status = 'RUNNING'"
        " AND attempt = :attempt FOR UPDATE"
    )
)
GET_WAIT = prepare(
    text(
        "SELECT until, attempt, resolved_at, resolved_by, payload,"
        " extract(epoch FROM until - now()) AS left_s,"
        " extract(epoch FROM until - clock_timestamp()) AS due_in_s,"
        " extract(epoch FROM clock_timestamp() - resolved_at) AS handed_s FROM run_waits"
        " WHERE run_id = :run_id AND kind = :kind AND name = :name AND occurrence = :occurrence"
    )
)
# The oldest signal of that name nobody took yet: taken (first in, first out).
TAKE_SIGNAL = prepare(
    text(
        "UPDATE run_signals SET delivered_at = now() WHERE seq = ("
        " SELECT seq FROM run_signals WHERE run_id = :run_id AND name = :name"
        " AND delivered_at IS NULL ORDER BY seq LIMIT 1) RETURNING payload"
    )
)
# The durable record of a sleep or wait: its timer (absolute, or `now()` + seconds: PostgreSQL's
# clock), and, when it was satisfied at once, how.
RECORD_WAIT = prepare(
    text(
        "INSERT INTO run_waits (run_id, kind, name, occurrence, attempt, until, resolved_at,"
        " resolved_by, payload, wait_id)"
        " VALUES (:run_id, :kind, :name, :occurrence, :attempt,"
        " coalesce(CAST(:until AS timestamptz), now() + make_interval(secs => :seconds)),"
        " CASE WHEN CAST(:resolved_by AS text) IS NULL THEN NULL ELSE now() END,"
        " CAST(:resolved_by AS text), CAST(:payload AS jsonb), CAST(:wait_id AS text))"
        " ON CONFLICT (run_id, kind, name, occurrence) DO UPDATE SET"
        " resolved_at = EXCLUDED.resolved_at, resolved_by = EXCLUDED.resolved_by,"
        " payload = EXCLUDED.payload"
        " RETURNING until, extract(epoch FROM until - now()) AS left_s"
    )
)
# --- signalRun ----------------------------------------------------------------------------------

# A wait that named itself (`wait_id`): the signal it waits for.
NAMED_WAIT = prepare(
    text("SELECT name FROM run_waits WHERE run_id = :run_id AND wait_id = :wait_id")
)

LOCK_RUN = prepare(
    text("SELECT * FROM runs WHERE id = :run_id AND tenant_id = :tenant_id FOR UPDATE").columns(
        *RUN_COLUMNS
    )
)
INSERT_SIGNAL = prepare(
    text(
        "INSERT INTO run_signals (run_id, tenant_id, name, payload, idempotency_key)"
        " VALUES (:run_id, :tenant_id, :name, CAST(:payload AS jsonb), :idempotency_key)"
        " ON CONFLICT (run_id, idempotency_key) WHERE idempotency_key IS NOT NULL DO NOTHING"
        " RETURNING seq"
    )
)
# The run's kept signals (not taken by a wait yet): how many, and their payloads' bytes.
MAILBOX = prepare(
    text(
        "SELECT count(*) AS n, coalesce(sum(octet_length(payload::text)), 0) AS bytes"
        " FROM run_signals WHERE run_id = :run_id AND delivered_at IS NULL"
    )
)
WAITING_RUNS = prepare(text("SELECT count(*) AS n FROM runs WHERE status = 'WAITING'"))
# The sleeps and waits a run has reached so far (`ctx.patched`: has an earlier attempt gone past
# this point?), the furthest occurrence of each; a limit's park is per attempt, not a point.
REACHED = prepare(
    text(
        "SELECT kind, name, max(occurrence) AS occurrence FROM run_waits"
        " WHERE run_id = :run_id AND NOT (kind = 'sleep' AND name LIKE 'limit:%')"
        " GROUP BY kind, name"
    )
)
