"""The schedules' statements, built once at import from the constants here (values are bound)."""

from __future__ import annotations

from sqlalchemy import column, text

from outlive.db.models import Schedule
from outlive.db.raw import prepare

COLUMNS = tuple(Schedule.__table__.c)
WINDOW = 4  # the clock looks at this many times its batch of the earliest due schedules
# The time the clock reads: PostgreSQL's, `:ahead_s` ahead (0 but in a test harness: its fake
# clock, `db.ports.TimeSource`).
NOW = "(now() + make_interval(secs => :ahead_s))"

# Creates of one tenant take turns, so its cap holds however many arrive at once.
LOCK_TENANT = prepare(
    text(
        "SELECT pg_advisory_xact_lock(hashtextextended("
        "'schedules/' || CAST(CAST(:tenant_id AS uuid) AS text), 44)) IS NULL AS locked"
    )
)
COUNT = prepare(text("SELECT count(*) AS n FROM schedules WHERE tenant_id = :tenant_id"))
BY_ORIGIN = prepare(
    text("SELECT * FROM schedules WHERE tenant_id = :tenant_id AND origin = :origin").columns(
        *COLUMNS
    )
)
INSERT = prepare(
    text(
        "INSERT INTO schedules (id, tenant_id, agent, cron, timezone, input, key, on_conflict,"
        " tags, jitter_seconds, catchup_window_seconds, next_occurrence, next_fire_at, origin)"
        " VALUES (:id, :tenant_id, :agent, :cron, :timezone, CAST(:input AS jsonb), :key,"
        " :on_conflict, CAST(:tags AS text[]), :jitter_seconds, :catchup_window_seconds,"
        " :next_occurrence, :next_fire_at, :origin) RETURNING *"
    ).columns(*COLUMNS)
)
UPDATE = prepare(
    text(
        "UPDATE schedules SET agent = :agent, cron = :cron, timezone = :timezone,"
        " input = CAST(:input AS jsonb), key = :key, on_conflict = :on_conflict,"
        " tags = CAST(:tags AS text[]), jitter_seconds = :jitter_seconds,"
        " catchup_window_seconds = :catchup_window_seconds,"
        " next_occurrence = CASE WHEN paused_at IS NULL"
        "   THEN CAST(:next_occurrence AS timestamptz) END,"
        " next_fire_at = CASE WHEN paused_at IS NULL THEN CAST(:next_fire_at AS timestamptz) END,"
        " updated_at = now()"
        " WHERE id = :id AND tenant_id = :tenant_id RETURNING *"
    ).columns(*COLUMNS)
)
DELETE = prepare(
    text("DELETE FROM schedules WHERE id = :id AND tenant_id = :tenant_id RETURNING id")
)
PAUSE = prepare(
    text(
        "UPDATE schedules SET paused_at = coalesce(paused_at, now()), next_occurrence = NULL,"
        " next_fire_at = NULL, updated_at = now() WHERE id = :id AND tenant_id = :tenant_id"
        " RETURNING *"
    ).columns(*COLUMNS)
)
# The cursor of a schedule: where its clock goes on from (a resume, a fire, an update).
MOVE = prepare(
    text(
        "UPDATE schedules SET paused_at = NULL, next_occurrence = :next_occurrence,"
        " next_fire_at = :next_fire_at,"
        " last_fire_at = coalesce(CAST(:fired_at AS timestamptz), last_fire_at),"
        " updated_at = now() WHERE id = :id RETURNING *"
    ).columns(*COLUMNS)
)
GET = prepare(
    text("SELECT * FROM schedules WHERE id = :id AND tenant_id = :tenant_id").columns(*COLUMNS)
)
# One schedule, its row locked: a trigger or a backfill takes turns with its clock. `db_now`:
# the time the clock reads, `:ahead_s` ahead of PostgreSQL's (`db.ports.TimeSource`).
LOCK = prepare(
    text(
        f"SELECT *, {NOW} AS db_now FROM schedules WHERE id = :id AND tenant_id = :tenant_id"
        " FOR UPDATE"
    ).columns(*COLUMNS, column("db_now"))
)
PAGE = prepare(
    text(
        "SELECT * FROM schedules WHERE tenant_id = :tenant_id AND (CAST(:after AS uuid) IS NULL"
        " OR (created_at, id) > (SELECT created_at, id FROM schedules"
        "   WHERE id = CAST(:after AS uuid) AND tenant_id = :tenant_id))"
        " ORDER BY created_at, id LIMIT :first"
    ).columns(*COLUMNS)
)
# The occurrences among `:at` that already have a run (a backfill, a trigger, an earlier fire).
HAVE_RUNS = prepare(
    text(
        "SELECT scheduled_for FROM runs WHERE schedule_id = :id"
        " AND scheduled_for = ANY(CAST(:at AS timestamptz[]))"
    )
)

# Every cursor of a tenant's batch in one statement.
MOVE_MANY = prepare(
    text(
        "UPDATE schedules s SET next_occurrence = m.occurrence, next_fire_at = m.fire_at,"
        " last_fire_at = coalesce(m.fired_at, s.last_fire_at), updated_at = now()"
        " FROM unnest(CAST(:ids AS uuid[]), CAST(:occurrences AS timestamptz[]),"
        " CAST(:fires AS timestamptz[]), CAST(:fired AS timestamptz[]))"
        " AS m(id, occurrence, fire_at, fired_at) WHERE s.id = m.id RETURNING s.id"
    )
)

# --- the clock -----------------------------------------------------------------------------------

# The earliest due schedules, each tenant's first before anyone's second, grouped by tenant.
DUE = prepare(
    text(
        f"""WITH due AS (SELECT id, tenant_id, next_fire_at FROM schedules
                         WHERE next_fire_at <= {NOW} ORDER BY next_fire_at LIMIT :window),
        fair AS (SELECT id, tenant_id, next_fire_at FROM (
                   SELECT id, tenant_id, next_fire_at, row_number() OVER (
                          PARTITION BY tenant_id ORDER BY next_fire_at) AS turn FROM due) d
                  ORDER BY turn, next_fire_at LIMIT :batch)
        SELECT tenant_id, array_agg(id ORDER BY next_fire_at) AS ids FROM fair GROUP BY tenant_id"""
    )
)
# A tenant's due schedules among `:ids`, locked; another relay firing them skips them.
TAKE = prepare(
    text(
        f"SELECT *, {NOW} AS db_now FROM schedules WHERE id = ANY(:ids)"
        f" AND tenant_id = :tenant_id AND next_fire_at <= {NOW}"
        " ORDER BY next_fire_at FOR UPDATE SKIP LOCKED"
    ).columns(*COLUMNS, column("db_now"))
)
NOTIFY_CLOCK = prepare(text("SELECT 1 AS n FROM pg_notify('outlive_relay', 'schedules')"))
