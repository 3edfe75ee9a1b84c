"""Usage: runs per tenant, UTC day, agent and status.

The nightly roll-up recomputes the last `ROLLUP_DAYS` finished UTC days (a run created on one day
can settle on the next, so recent days are recomputed rather than added to; re-running it never
doubles a count) and marks them rolled up. `usage` serves rolled-up days from `usage_daily` and
counts the days after the last rolled-up one (today, at least) live from `runs`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta

from sqlalchemy import func, select, text
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.ext.asyncio import AsyncSession

from outlive.db.models import UsageRollup
from outlive.db.tx import UnitOfWork
from outlive.errors import BadUserInput
from outlive.ids import TenantId

ROLLUP_DAYS = 7
MAX_DAYS = 366

_ROLL_UP_DAY = text(
    """
    WITH fresh AS (
        SELECT tenant_id, agent, status, count(*) AS count FROM runs
        WHERE created_at >= CAST(:day AS date) AT TIME ZONE 'UTC'
          AND created_at < (CAST(:day AS date) + 1) AT TIME ZONE 'UTC'
        GROUP BY tenant_id, agent, status
    ), cleared AS (
        DELETE FROM usage_daily WHERE day = :day
          AND (tenant_id, agent, status) NOT IN (SELECT tenant_id, agent, status FROM fresh)
    )
    INSERT INTO usage_daily (tenant_id, day, agent, status, count)
    SELECT tenant_id, :day, agent, status, count FROM fresh
    ON CONFLICT (tenant_id, day, agent, status) DO UPDATE SET count = EXCLUDED.count
    """
)
_ROLLED = text(
    """SELECT to_char(day, 'YYYY-MM-DD') AS day, agent, status, count FROM usage_daily
       WHERE tenant_id = :tenant_id AND day >= :since AND day <= :until"""
)
_LIVE = text(
    """SELECT to_char((created_at AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS day, agent, status,
              count(*) AS count
       FROM runs
       WHERE tenant_id = :tenant_id AND created_at >= CAST(:since AS date) AT TIME ZONE 'UTC'
       GROUP BY 1, 2, 3"""
)


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
    await uow.session.execute(_ROLL_UP_DAY, {"day": day})
    await uow.session.execute(
        pg_insert(UsageRollup)
        .values(day=day)
        .on_conflict_do_update(index_elements=["day"], set_={"rolled_at": func.now()})
    )


def days_to_roll_up(today: date, retention_days: int) -> list[date]:
    """Yesterday and the days before it, never reaching back into pruned days."""
    span = max(1, min(ROLLUP_DAYS, retention_days - 1))
    return [today - timedelta(days=n) for n in range(span, 0, -1)]


async def usage(
    session: AsyncSession, tenant_id: TenantId, *, days: int, today: date | None = None
) -> list[UsageDay]:
    if not 1 <= days <= MAX_DAYS:
        raise BadUserInput(f"days must be between 1 and {MAX_DAYS}")
    today = today or utc_today()
    since = today - timedelta(days=days - 1)
    rolled_until = await session.scalar(select(func.max(UsageRollup.day)))
    rows: list[UsageDay] = []
    live_since = since
    if rolled_until is not None and rolled_until >= since:
        found = await session.execute(
            _ROLLED, {"tenant_id": tenant_id, "since": since, "until": rolled_until}
        )
        rows += [UsageDay(*r) for r in found]
        live_since = rolled_until + timedelta(days=1)
    if live_since <= today:
        found = await session.execute(_LIVE, {"tenant_id": tenant_id, "since": live_since})
        rows += [UsageDay(*r) for r in found]
    return sorted(rows, key=lambda u: (u.day, u.agent, u.status), reverse=False)
