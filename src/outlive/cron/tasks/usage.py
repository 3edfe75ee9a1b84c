"""`5 0 * * *`: roll up the last finished UTC days into `usage_daily` (idempotent)."""

from __future__ import annotations

from outlive.cron.deps import CronDeps
from outlive.services import usage


async def roll_up_daily_usage(deps: CronDeps) -> int:
    days = usage.days_to_roll_up(usage.utc_today(), deps.settings.retention_days)
    for day in days:  # a transaction per day: short, and a failure keeps the days before it
        async with deps.sessions.unit() as uow:
            await usage.roll_up_day(uow, day)
    return len(days)
