"""`0 * * * *`: delete settled runs (and their timelines), old deliveries, rejected jobs and
finished replays; `*/5 * * * *`: the signals settled runs never took."""

from __future__ import annotations

from outlive.cron.deps import CronDeps
from outlive.services import retention


async def prune_old_runs(deps: CronDeps) -> int:
    return await retention.prune_runs(deps.sessions, days=deps.settings.retention_days)


async def prune_old_deliveries(deps: CronDeps) -> int:
    days = deps.settings.retention_days
    return await retention.prune_deliveries(
        deps.sessions, days=days
    ) + await retention.prune_rejected_jobs(deps.sessions, days=days)


async def prune_old_replays(deps: CronDeps) -> int:
    return await retention.prune_replays(deps.sessions, days=deps.settings.retention_days)


async def prune_settled_signals(deps: CronDeps) -> int:
    return await retention.prune_settled_signals(deps.sessions)
