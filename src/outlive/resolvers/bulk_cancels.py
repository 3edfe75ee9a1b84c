"""`cancelRuns` and `cancelRunsCount`: cancel the active runs a filter selects, in the
background, after counting them (see `outlive.services.bulk_cancels`). Stopped, read and listed
as a replay is (`cancelRunReplay`, `runReplay`, `runReplays`)."""

from __future__ import annotations

from typing import Annotated

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.replays import CancelRunsFilter, RunReplay
from outlive.services import bulk_cancels
from outlive.services.bulk_filters import RunsFilter
from outlive.services.ratelimits import Bucket

Info = strawberry.Info[Context, None]

DEFAULT_LIMIT = 1000

Reason = Annotated[
    str | None,
    strawberry.argument(
        description="Why, in a line: recorded on each run's timeline with who asked, as "
        "cancelRun(reason:) does."
    ),
]
Rate = Annotated[
    float | None,
    strawberry.argument(description="At most this many runs cancelled a second (up to 200)."),
]


def cancel_filter(chosen: CancelRunsFilter | None) -> RunsFilter:
    return (chosen or CancelRunsFilter()).runs_filter(bulk_cancels.cancel_statuses)


async def cancel_runs(
    info: Info,
    filter: CancelRunsFilter | None = None,
    reason: Reason = None,
    rate: Rate = bulk_cancels.DEFAULT_RATE,
    limit: int | None = DEFAULT_LIMIT,
) -> RunReplay:
    ctx = info.context
    settings = ctx.services.settings
    chosen = cancel_filter(filter)  # BAD_USER_INPUT before a token is taken
    bulk_cancels.check_reason(reason)
    await ctx.services.limiter.take(  # each call writes a row, even one that matches nothing
        Bucket("cancel-runs", str(ctx.tenant_id), settings.rate_replay_runs),
        message="too many bulk cancels: try again in a moment",
    )
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        made = await bulk_cancels.create_cancel(
            uow,
            filter=chosen,
            reason=reason,
            by=ctx.require().user.email,
            rate=bulk_cancels.DEFAULT_RATE if rate is None else rate,
            limit=DEFAULT_LIMIT if limit is None else limit,
            max_runs=settings.replay_max_runs,
        )
    return RunReplay.of(made)


async def cancel_runs_count(
    info: Info, filter: CancelRunsFilter | None = None, limit: int | None = DEFAULT_LIMIT
) -> int:
    ctx = info.context
    chosen = cancel_filter(filter)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await bulk_cancels.count_cancel(
            uow,
            filter=chosen,
            limit=DEFAULT_LIMIT if limit is None else limit,
            max_runs=ctx.services.settings.replay_max_runs,
        )
