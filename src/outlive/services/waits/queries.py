"""Every statement of the waits slice (durable sleeps, waits for a signal, the mailbox).

Each one that moves a run carries its status in the predicate (a conditional update): parking
needs the attempt to still execute it (`status = 'RUNNING' AND attempt = :attempt`), a wake by a
signal needs it still WAITING for that name. Races (a signal against the timer, against
`cancelRun`, against the wait being registered) are decided by the run's row lock and these
predicates, never by a read followed by a write. The SQL is assembled from constants only.
"""

from __future__ import annotations

from sqlalchemy import column, text

from outlive.db.models import Run
from outlive.db.raw import prepare
from outlive.services.relay.queries import WOKEN_SETS

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
        "SELECT until, resolved_at, resolved_by, payload,"
        " extract(epoch FROM until - now()) AS left_s FROM run_waits"
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
        "INSERT INTO run_waits"
        " (run_id, kind, name, occurrence, attempt, until, resolved_at, resolved_by, payload)"
        " VALUES (:run_id, :kind, :name, :occurrence, :attempt,"
        " coalesce(CAST(:until AS timestamptz), now() + make_interval(secs => :seconds)),"
        " CASE WHEN CAST(:resolved_by AS text) IS NULL THEN NULL ELSE now() END,"
        " CAST(:resolved_by AS text), CAST(:payload AS jsonb))"
        " ON CONFLICT (run_id, kind, name, occurrence) DO UPDATE SET"
        " resolved_at = EXCLUDED.resolved_at, resolved_by = EXCLUDED.resolved_by,"
        " payload = EXCLUDED.payload"
        " RETURNING until, extract(epoch FROM until - now()) AS left_s"
    )
)
# RUNNING → WAITING for this attempt, with a `waiting {for, until}` event. The attempt ends.
PARK = prepare(
    text(
        """WITH moved AS (
            UPDATE runs SET status = 'WAITING', waiting_for = CAST(:waiting_for AS text),
                wake_at = CAST(:until AS timestamptz), lease_expires_at = NULL,
                event_seq = event_seq + 1, updated_at = now()
             WHERE id = :run_id AND status = 'RUNNING' AND attempt = :attempt
               AND cancel_requested_at IS NULL
            RETURNING *),
        appended AS (
            INSERT INTO run_events (run_id, seq, type, data)
            SELECT id, event_seq, 'waiting',
                   jsonb_build_object('for', waiting_for, 'until', wake_at) FROM moved)
        SELECT moved.*, (SELECT max_running_runs FROM tenants WHERE id = moved.tenant_id)
               AS tenant_max_running FROM moved"""
    ).columns(*RUN_COLUMNS, column("tenant_max_running"))
)

# --- signalRun ----------------------------------------------------------------------------------

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
# The run waits for this name: the signal is taken by its wait, and the run is woken (QUEUED,
# admitted at once unless its tenant is capped), with `signal` and `resumed {by: signal}`.
WAKE_BY_SIGNAL = prepare(
    text(
        f"""WITH moved AS (
            UPDATE runs SET {WOKEN_SETS}, event_seq = event_seq + 2
             WHERE id = :run_id AND status = 'WAITING' AND waiting_for = :name
            RETURNING *),
        delivered AS (
            UPDATE run_signals SET delivered_at = now()
             WHERE seq = :seq AND EXISTS (SELECT 1 FROM moved) RETURNING seq),
        resolved AS (
            UPDATE run_waits w SET resolved_at = now(), resolved_by = 'signal',
                   payload = CAST(:payload AS jsonb)
              FROM moved WHERE w.run_id = moved.id AND w.resolved_at IS NULL),
        appended AS (
            INSERT INTO run_events (run_id, seq, type, data)
            SELECT id, event_seq - 1, 'signal', jsonb_build_object('name', CAST(:name AS text),
                   'payload', CAST(:payload AS jsonb), 'by', CAST(:sender AS text))
              FROM moved
            UNION ALL
            SELECT id, event_seq, 'resumed', '{{"by": "signal"}}'::jsonb FROM moved)
        SELECT moved.* FROM moved"""
    ).columns(*RUN_COLUMNS)
)
# Kept in the mailbox: only the `signal` event. Both record the payload and who sent it (`by`:
# the email of the token's user), the run's audit trail of its approvals.
SIGNAL_EVENT = prepare(
    text(
        """WITH moved AS (
            UPDATE runs SET event_seq = event_seq + 1 WHERE id = :run_id RETURNING *),
        appended AS (
            INSERT INTO run_events (run_id, seq, type, data)
            SELECT id, event_seq, 'signal', jsonb_build_object('name', CAST(:name AS text),
                   'payload', CAST(:payload AS jsonb), 'by', CAST(:sender AS text))
              FROM moved)
        SELECT moved.* FROM moved"""
    ).columns(*RUN_COLUMNS)
)
WAITING_RUNS = prepare(text("SELECT count(*) AS n FROM runs WHERE status = 'WAITING'"))
