"""`schedules`, `schedule`, and the schedule mutations (OPERATOR): create, update, delete,
pause, resume, trigger, backfill (contract §4.2)."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Annotated, Any, cast

import strawberry

from outlive.db.models import RunConflict
from outlive.resolvers.context import Context
from outlive.schema.runs import Run, StartRunPayload
from outlive.schema.schedules import Schedule, ScheduleInput
from outlive.services import schedules, sealing
from outlive.services.ids import parse_uuid
from outlive.services.schedules import fires

Info = strawberry.Info[Context, None]


def _limits(ctx: Context) -> schedules.ScheduleLimits:
    settings = ctx.services.settings
    return schedules.ScheduleLimits(settings.tenant_max_schedules, settings.schedule_min_interval_s)


async def _sealed(ctx: Context, spec: schedules.ScheduleSpec) -> schedules.ScheduleSpec:
    """The spec as it is stored: a tenant that encrypts has its input sealed."""
    cipher = await ctx.write_cipher()
    return spec if cipher is None else replace(spec, input=sealing.seal_value(cipher, spec.input))


async def _shown(ctx: Context, found: schedules.ScheduleRecord) -> Schedule:
    """The schedule as the client gave it (a sealed input opened)."""
    opened = await ctx.loaders.ciphers.open(found.tenant_id, found.input)
    return Schedule.of(replace(found, input=opened))


def _spec(ctx: Context, input: ScheduleInput) -> schedules.ScheduleSpec:
    """The checked spec: the agent installed, its input validated by it, the cron, zone and
    limits checked (BAD_USER_INPUT before anything is written)."""
    s = ctx.services
    agent = s.agents.require(input.agent)
    params = agent.validate(cast(Any, input.input or {}), settings=s.settings)
    spec = schedules.ScheduleSpec(
        agent=agent.name,
        cron=input.cron,
        input=dict(params),
        timezone=input.timezone or "UTC",
        key=input.key,
        on_conflict=input.on_conflict or RunConflict.REJECT,
        tags=tuple(input.tags or ()),
        jitter_seconds=0 if input.jitter_seconds is None else input.jitter_seconds,
        catchup_window_seconds=300
        if input.catchup_window_seconds is None
        else input.catchup_window_seconds,
    )
    return schedules.check_spec(spec, _limits(ctx))


async def list_schedules(
    info: Info, first: int | None = 50, after: str | None = None
) -> list[Schedule]:
    ctx = info.context
    ctx.require_member()
    found = await schedules.list_schedules(
        ctx.services.sessions, ctx.tenant_id, first=50 if first is None else first, after=after
    )
    return [await _shown(ctx, s) for s in found]


async def schedule(info: Info, id: strawberry.ID) -> Schedule | None:
    ctx = info.context
    ctx.require_member()
    found = await schedules.read_schedule(
        ctx.services.sessions, ctx.tenant_id, parse_uuid(id, what="schedule")
    )
    return None if found is None else await _shown(ctx, found)


async def create_schedule(info: Info, input: ScheduleInput) -> Schedule:
    ctx = info.context
    spec = await _sealed(ctx, _spec(ctx, input))
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        created = await schedules.create_schedule(
            uow, spec, limits=_limits(ctx), time=ctx.services.time
        )
    return await _shown(ctx, created)


async def update_schedule(info: Info, id: strawberry.ID, input: ScheduleInput) -> Schedule:
    ctx = info.context
    schedule_id, spec = parse_uuid(id, what="schedule"), await _sealed(ctx, _spec(ctx, input))
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        updated = await schedules.update_schedule(uow, schedule_id, spec, time=ctx.services.time)
    return await _shown(ctx, updated)


async def delete_schedule(info: Info, id: strawberry.ID) -> bool:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await schedules.delete_schedule(uow, parse_uuid(id, what="schedule"))


async def pause_schedule(info: Info, id: strawberry.ID) -> Schedule:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        paused = await schedules.pause_schedule(uow, parse_uuid(id, what="schedule"))
    return await _shown(ctx, paused)


async def resume_schedule(info: Info, id: strawberry.ID) -> Schedule:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        schedule_id = parse_uuid(id, what="schedule")
        resumed = await schedules.resume_schedule(uow, schedule_id, time=ctx.services.time)
    return await _shown(ctx, resumed)


async def trigger_schedule(info: Info, id: strawberry.ID) -> StartRunPayload:
    ctx = info.context
    schedule_id = parse_uuid(id, what="schedule")
    cipher = await ctx.write_cipher()  # a tenant that encrypts: the run's input is sealed
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        started = await fires.trigger_schedule(
            uow,
            schedule_id,
            instances=ctx.services.instances,
            cipher=cipher,
            time=ctx.services.time,
        )
    (shown,) = await ctx.opened([started.run])
    return StartRunPayload(run=Run.of(shown), created=started.created)


async def backfill_schedule(
    info: Info,
    id: strawberry.ID,
    from_: Annotated[datetime, strawberry.argument(name="from")],
    to: datetime,
) -> int:
    ctx = info.context
    schedule_id = parse_uuid(id, what="schedule")
    cipher = await ctx.write_cipher()  # a tenant that encrypts: the runs' inputs are sealed
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await fires.backfill_schedule(
            uow,
            schedule_id,
            from_,
            to,
            instances=ctx.services.instances,
            cipher=cipher,
            time=ctx.services.time,
        )
