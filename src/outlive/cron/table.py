"""The cron dispatch table: each exact cron expression (UTC) and the tasks it runs.

To add a task: write `async def my_task(deps: CronDeps) -> int` in `outlive/cron/tasks/`,
idempotent and batched, and list it under its expression here. A new expression becomes a saq
cron job of its own automatically (see `outlive.cron.dispatch`).
"""

from __future__ import annotations

from outlive.cron.deps import CronTask
from outlive.cron.tasks.invitations import expire_invitations
from outlive.cron.tasks.retention import (
    prune_old_deliveries,
    prune_old_replays,
    prune_old_runs,
    prune_settled_signals,
)
from outlive.cron.tasks.usage import roll_up_daily_usage

CRON: dict[str, list[CronTask]] = {
    "0 * * * *": [prune_old_runs, prune_old_deliveries, prune_old_replays],
    "*/5 * * * *": [prune_settled_signals],
    "5 0 * * *": [roll_up_daily_usage],
    "*/10 * * * *": [expire_invitations],
}
