"""Usage: runs per tenant, UTC day, agent and status.

The nightly roll-up recomputes the last `ROLLUP_DAYS` finished UTC days (a run created on one day
can settle on the next, so recent days are recomputed rather than added to; re-running it never
doubles a count) and marks them rolled up. `usage` serves rolled-up days from `usage_daily` and
counts the days after the last rolled-up one (today, at least) live from `runs`. Runs deleted by
retention or `eraseSubject` still count: the statement that deleted them added them to
`usage_kept_runs` (`outlive.services.kept_usage`), which both add to `runs`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from typing import Any

from sqlalchemy import text

from outlive.db.raw import prepare
from outlive.db.tx import Db, UnitOfWork
from outlive.errors import BadUserInput
from outlive.ids import TenantId

ROLLUP_DAYS = 7
MAX_DAYS = 366
MAX_STATS_HOURS = 31 * 24

_ROLL_UP_DAY = prepare(
    text(
        """
    WITH fresh AS (
        SELECT tenant_id, agent, status, sum(count) AS count FROM (
            SELECT tenant_id, agent, status, count(*) AS count FROM runs
            WHERE created_at >= CAST(:day AS date) AT TIME ZONE 'UTC'
              AND created_at < (CAST(:day AS date) + 1) AT TIME ZONE 'UTC'
            GROUP BY tenant_id, agent, status
            UNION ALL
            SELECT tenant_id, agent, status, count FROM usage_kept_runs
            WHERE day = CAST(:day AS date)
        ) counted GROUP BY tenant_id, agent, status
    ), cleared AS (
        DELETE FROM usage_daily WHERE day = :day
          AND (tenant_id, agent, status) NOT IN (SELECT tenant_id, agent, status FROM fresh)
    )
    INSERT INTO usage_daily (tenant_id, day, agent, status, count)
    SELECT tenant_id, :day, agent, status, count FROM fresh
    ON CONFLICT (tenant_id, day, agent, status) DO UPDATE SET count = EXCLUDED.count
    """
    )
)
_MARK_ROLLED = prepare(
    text(
        "INSERT INTO usage_rollups (day) VALUES (:day)"
        " ON CONFLICT (day) DO UPDATE SET rolled_at = now()"
    )
)
_ROLLED_UNTIL = prepare(text("SELECT max(day) AS day FROM usage_rollups"))
_ROLLED = prepare(
    text(
        """SELECT to_char(day, 'YYYY-MM-DD') AS day, agent, status, count FROM usage_daily
           WHERE tenant_id = :tenant_id AND day >= :since AND day <= :until"""
    )
)
_LIVE = prepare(
    text(
        """SELECT to_char(day, 'YYYY-MM-DD') AS day, agent, status, sum(count)::int AS count
           FROM (SELECT (created_at AT TIME ZONE 'UTC')::date AS day, agent, status,
                        count(*) AS count
                   FROM runs
                  WHERE tenant_id = :tenant_id
                    AND created_at >= CAST(:since AS date) AT TIME ZONE 'UTC'
                  GROUP BY 1, 2, 3
                 UNION ALL
                 SELECT day, agent, status, count FROM usage_kept_runs
                  WHERE tenant_id = :tenant_id AND day >= CAST(:since AS date)) counted
           GROUP BY 1, 2, 3"""
    )
)
# Per agent, the runs created in the last `hours`: counts by outcome and the median duration
# (started to finished) of the ones that succeeded. Served by the (tenant_id, created_at) index.
_AGENT_STATS = prepare(
    text(
        """SELECT agent, count(*) AS runs,
                  count(*) FILTER (WHERE status = 'SUCCEEDED') AS succeeded,
                  count(*) FILTER (WHERE status = 'FAILED') AS failed,
                  count(*) FILTER (WHERE status = 'CANCELLED') AS cancelled,
                  percentile_cont(0.5) WITHIN GROUP (
                      ORDER BY extract(epoch FROM finished_at - started_at) * 1000)
                    FILTER (WHERE status = 'SUCCEEDED' AND started_at IS NOT NULL
                            AND finished_at IS NOT NULL) AS p50_ms
           FROM runs
           WHERE tenant_id = :tenant_id AND created_at >= now() - make_interval(hours => :hours)
           GROUP BY agent ORDER BY agent"""
    )
)


@dataclass(frozen=True, slots=True)
class AgentStats:
    agent: str
    hours: int
    runs: int
    succeeded: int
    failed: int
    cancelled: int
    p50_duration_ms: float | None


async def agent_stats(db: Db, tenant_id: TenantId, *, hours: int) -> list[AgentStats]:
    """The tenant's agents that have runs created in the last `hours` (1 to 744), by name."""
    if not 1 <= hours <= MAX_STATS_HOURS:
        raise BadUserInput(f"hours must be between 1 and {MAX_STATS_HOURS}")
    rows = await db.all(_AGENT_STATS, tenant_id=tenant_id, hours=hours)
    return [
        AgentStats(
            agent=r["agent"],
            hours=hours,
            runs=r["runs"],
            succeeded=r["succeeded"],
            failed=r["failed"],
            cancelled=r["cancelled"],
            p50_duration_ms=None if r["p50_ms"] is None else float(r["p50_ms"]),
        )
        for r in rows
    ]


@dataclass(frozen=True, slots=True)
class UsageDay:
    day: str
    agent: str
    status: str
    count: int


def utc_today() -> date:
    return datetime.now(UTC).date()


async def roll_up_day(uow: UnitOfWork, day: date) -> None:
    """Recompute one finished UTC day; idempotent."""
    await uow.execute(_ROLL_UP_DAY, day=day)
    await uow.execute(_MARK_ROLLED, day=day)


def days_to_roll_up(today: date, retention_days: int) -> list[date]:
    """Yesterday and the days before it, never reaching back into pruned days."""
    span = max(1, min(ROLLUP_DAYS, retention_days - 1))
    return [today - timedelta(days=n) for n in range(span, 0, -1)]


def _day(row: Mapping[str, Any]) -> UsageDay:
    return UsageDay(day=row["day"], agent=row["agent"], status=row["status"], count=row["count"])


async def usage(
    db: Db, tenant_id: TenantId, *, days: int, today: date | None = None
) -> list[UsageDay]:
    if not 1 <= days <= MAX_DAYS:
        raise BadUserInput(f"days must be between 1 and {MAX_DAYS}")
    today = today or utc_today()
    since = today - timedelta(days=days - 1)
    rolled = await db.one(_ROLLED_UNTIL)
    rolled_until = None if rolled is None else rolled["day"]
    rows: list[UsageDay] = []
    live_since = since
    if rolled_until is not None and rolled_until >= since:
        found = await db.all(_ROLLED, tenant_id=tenant_id, since=since, until=rolled_until)
        rows += [_day(r) for r in found]
        live_since = rolled_until + timedelta(days=1)
    if live_since <= today:
        found = await db.all(_LIVE, tenant_id=tenant_id, since=live_since)
        rows += [_day(r) for r in found]
    return sorted(rows, key=lambda u: (u.day, u.agent, u.status), reverse=False)
