"""`retryRun`, `replayRuns`, `cancelRunReplay` (which stops a bulk cancel too), `runReplay`,
`runReplays`: tenant-scoped like the rest (another tenant's id is NOT_FOUND, or null where it is
read)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import strawberry
from strawberry.scalars import JSON

from outlive.errors import BadUserInput
from outlive.resolvers.context import Context
from outlive.schema.replays import ReplayRunsFilter, RunReplay
from outlive.schema.runs import Run, StartRunPayload
from outlive.services import replays
from outlive.services import runs as runs_service
from outlive.services.bulk_filters import RunsFilter
from outlive.services.ids import parse_uuid
from outlive.services.ratelimits import Bucket, start_run_bucket

Info = strawberry.Info[Context, None]

DEFAULT_RATE = 1.0
DEFAULT_LIMIT = 100


def _validator(ctx: Context) -> replays.Validate:
    agents, settings = ctx.services.agents, ctx.services.settings

    def validate(agent: str, stored: Mapping[str, Any]) -> Mapping[str, Any]:
        return agents.require(agent).validate(stored, settings=settings)

    return validate


async def retry_run(
    info: Info,
    id: strawberry.ID,
    input: JSON | None = None,
    reuse_steps: bool | None = False,
) -> StartRunPayload:
    ctx = info.context
    if input is not None and not isinstance(input, Mapping):
        raise BadUserInput("input must be a JSON object")
    run_id = runs_service.parse_run_id(id)
    await ctx.services.limiter.take(  # startRun's bucket: a retry starts a run
        start_run_bucket(ctx.tenant_id, ctx.services.settings.rate_start_run),
        message="too many runs started: try again in a moment",
    )
    cipher = await ctx.write_cipher()  # opens the run's input, seals the new run's
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        started = await replays.retry_run(
            uow,
            run_id,
            validate=_validator(ctx),
            instances=ctx.services.instances,
            input=input,
            reuse_steps=bool(reuse_steps),
            cipher=cipher,
        )
    (shown,) = await ctx.opened([started.run])
    return StartRunPayload(run=Run.of(shown), created=started.created)


def replay_filter(chosen: ReplayRunsFilter | None) -> RunsFilter:
    return (chosen or ReplayRunsFilter()).runs_filter(replays.replay_statuses)


async def replay_runs(
    info: Info,
    filter: ReplayRunsFilter | None = None,
    rate: float | None = DEFAULT_RATE,
    limit: int | None = DEFAULT_LIMIT,
) -> RunReplay:
    ctx = info.context
    settings = ctx.services.settings
    chosen = replay_filter(filter)  # BAD_USER_INPUT before a token is taken
    await ctx.services.limiter.take(  # each call writes a row, even one that matches nothing
        Bucket("replay-runs", str(ctx.tenant_id), settings.rate_replay_runs),
        message="too many replays started: try again in a moment",
    )
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        replay = await replays.create_replay(
            uow,
            filter=chosen,
            rate=DEFAULT_RATE if rate is None else rate,
            limit=DEFAULT_LIMIT if limit is None else limit,
            max_rate=settings.replay_max_rate,
            max_runs=settings.replay_max_runs,
        )
    return RunReplay.of(replay)


async def replay_runs_count(
    info: Info, filter: ReplayRunsFilter | None = None, limit: int | None = DEFAULT_LIMIT
) -> int:
    ctx = info.context
    chosen = replay_filter(filter)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await replays.count_replay(
            uow,
            filter=chosen,
            limit=DEFAULT_LIMIT if limit is None else limit,
            max_runs=ctx.services.settings.replay_max_runs,
        )


async def cancel_run_replay(info: Info, id: strawberry.ID) -> RunReplay:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        replay = await replays.cancel_replay(uow, parse_uuid(id, what="replay"))
    return RunReplay.of(replay)


async def run_replay(info: Info, id: strawberry.ID) -> RunReplay | None:
    ctx = info.context
    found = await replays.get_replay(
        ctx.services.sessions, ctx.tenant_id, parse_uuid(id, what="replay")
    )
    return RunReplay.of(found) if found is not None else None


async def run_replays(info: Info, first: int | None = 20) -> list[RunReplay]:
    ctx = info.context
    found = await replays.list_replays(
        ctx.services.sessions, ctx.tenant_id, first=20 if first is None else first
    )
    return [RunReplay.of(r) for r in found]
