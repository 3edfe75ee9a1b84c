"""Schedules as data (contract §4.2, §7 "Schedules"): a tenant's own cron, in PostgreSQL.

A package of slices: `cron` (expressions, time zones, DST, jitter), `records` (what it hands out
and is given), `queries` (every statement), `fires` (the clock: an occurrence's run, triggers and
backfills). This module is the API's side: create, update, delete, pause, resume, read.

A schedule's runs share its key (default `schedule:<id>`) and meet its last run as that key's
`onConflict` says (the overlap policy; REJECT by default). Each write sends `schedule.updated`.
Limits per tenant: at most `OUTLIVE_TENANT_MAX_SCHEDULES` schedules, none firing more often than
every `OUTLIVE_SCHEDULE_MIN_INTERVAL_S`, so one tenant cannot flood the clock.

"Now" is the time a `TimeSource` reads (`db.ports`): the real time (`REAL_TIME`) but under a test
harness's fake clock, which the writes here and the clock (`fires`) read alike.
"""

from __future__ import annotations

import json
import uuid
from datetime import datetime
from typing import TYPE_CHECKING
from uuid import UUID

from outlive.db.ports import REAL_TIME, TimeSource, now_of
from outlive.db.tx import Db, Unit
from outlive.errors import BadUserInput, NotFound
from outlive.services import sealing
from outlive.services.runs import json_text
from outlive.services.schedules import cron, queries
from outlive.services.schedules.records import (
    ScheduleLimits,
    ScheduleRecord,
    ScheduleSpec,
    check_spec,
    to_schedule,
)

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

__all__ = [
    "ScheduleLimits",
    "ScheduleRecord",
    "ScheduleSpec",
    "check_spec",
    "create_schedule",
    "delete_schedule",
    "list_schedules",
    "pause_schedule",
    "read_schedule",
    "resume_schedule",
    "update_schedule",
]

MAX_PAGE = 200


def cursor_after(
    schedule_id: UUID, spec_cron: str, timezone: str, jitter_s: int, after: datetime
) -> tuple[datetime, datetime]:
    """The first occurrence after `after` and when it fires (its jitter added)."""
    zone = cron.check_timezone(timezone)
    occurrence = cron.next_after(cron.check_cron(spec_cron), zone, after)
    return occurrence, occurrence + cron.jitter(schedule_id, occurrence, jitter_s)


def _values(schedule_id: UUID, spec: ScheduleSpec, now: datetime) -> dict[str, object]:
    occurrence, fire_at = cursor_after(
        schedule_id, spec.cron, spec.timezone, spec.jitter_seconds, now
    )
    return {
        "id": schedule_id,
        "agent": spec.agent,
        "cron": spec.cron,
        "timezone": spec.timezone,
        "input": json_text(spec.input),
        "key": spec.key or f"schedule:{schedule_id}",
        "on_conflict": spec.on_conflict.value,
        "tags": list(spec.tags),
        "jitter_seconds": spec.jitter_seconds,
        "catchup_window_seconds": spec.catchup_window_seconds,
        "next_occurrence": occurrence,
        "next_fire_at": fire_at,
    }


async def create_schedule(
    uow: Unit,
    spec: ScheduleSpec,
    *,
    limits: ScheduleLimits,
    origin: str | None = None,
    time: TimeSource = REAL_TIME,
) -> ScheduleRecord:
    """Insert a checked spec (`check_spec`); its first occurrence is the first after now.
    `origin`: made by a run's step (`ctx.schedules.create`): a second create of the same origin
    hands back the first schedule. `BadUserInput` past the tenant's cap."""
    tenant_id = uow.require_tenant()
    await uow.one(queries.LOCK_TENANT, tenant_id=tenant_id)
    if origin is not None:
        earlier = await uow.one(queries.BY_ORIGIN, tenant_id=tenant_id, origin=origin)
        if earlier is not None:
            return to_schedule(earlier)
    row = await uow.one(queries.COUNT, tenant_id=tenant_id)
    if row is not None and int(row["n"]) >= limits.max_schedules:
        raise BadUserInput(
            f"this tenant has {limits.max_schedules} schedules, the most it may have"
            " (OUTLIVE_TENANT_MAX_SCHEDULES): delete one first"
        )
    values = _values(uuid.uuid4(), spec, now_of(time))
    created = await uow.one(queries.INSERT, tenant_id=tenant_id, origin=origin, **values)
    assert created is not None  # noqa: S101 (an INSERT … RETURNING returns its row)
    await uow.one(queries.NOTIFY_CLOCK)  # the relay's clock sleeps until its earliest fire
    uow.nudge("schedule.updated", created["id"])
    return to_schedule(created)


async def update_schedule(
    uow: Unit, schedule_id: UUID, spec: ScheduleSpec, *, time: TimeSource = REAL_TIME
) -> ScheduleRecord:
    """Replace a schedule's definition; its clock goes on from now (nothing missed is caught
    up), and a paused schedule stays paused."""
    values = _values(schedule_id, spec, now_of(time))
    row = await uow.one(queries.UPDATE, tenant_id=uow.require_tenant(), **values)
    if row is None:
        raise NotFound(f"no schedule {schedule_id}")
    await uow.one(queries.NOTIFY_CLOCK)
    uow.nudge("schedule.updated", schedule_id)
    return to_schedule(row)


async def delete_schedule(uow: Unit, schedule_id: UUID) -> bool:
    """Delete it (its runs stay, their `scheduleId` kept); False when there is none."""
    row = await uow.one(queries.DELETE, id=schedule_id, tenant_id=uow.require_tenant())
    if row is not None:
        uow.nudge("schedule.updated", schedule_id)
    return row is not None


async def pause_schedule(uow: Unit, schedule_id: UUID) -> ScheduleRecord:
    """Stop its clock (idempotent); runs already started go on."""
    row = await uow.one(queries.PAUSE, id=schedule_id, tenant_id=uow.require_tenant())
    if row is None:
        raise NotFound(f"no schedule {schedule_id}")
    uow.nudge("schedule.updated", schedule_id)
    return to_schedule(row)


async def resume_schedule(
    uow: Unit, schedule_id: UUID, *, time: TimeSource = REAL_TIME
) -> ScheduleRecord:
    """Start its clock again from now: occurrences missed while paused are skipped, never
    caught up (a running schedule comes back unchanged)."""
    tenant_id = uow.require_tenant()
    ahead_s = time.ahead().total_seconds()
    found = await uow.one(queries.LOCK, id=schedule_id, tenant_id=tenant_id, ahead_s=ahead_s)
    if found is None:
        raise NotFound(f"no schedule {schedule_id}")
    schedule = to_schedule(found)
    if schedule.paused_at is None:
        return schedule
    occurrence, fire_at = cursor_after(
        schedule.id, schedule.cron, schedule.timezone, schedule.jitter_seconds, found["db_now"]
    )
    row = await uow.one(
        queries.MOVE,
        id=schedule_id,
        next_occurrence=occurrence,
        next_fire_at=fire_at,
        fired_at=None,
    )
    assert row is not None  # noqa: S101 (the row is locked)
    await uow.one(queries.NOTIFY_CLOCK)
    uow.nudge("schedule.updated", schedule_id)
    return to_schedule(row)


async def read_schedule(db: Db, tenant_id: UUID, schedule_id: UUID) -> ScheduleRecord | None:
    row = await db.one(queries.GET, id=schedule_id, tenant_id=tenant_id)
    return None if row is None else to_schedule(row)


async def list_schedules(
    db: Db, tenant_id: UUID, *, first: int = 50, after: str | None = None
) -> list[ScheduleRecord]:
    """The tenant's schedules, oldest first; `after`: the id of the last one of the page before."""
    if not 0 <= first <= MAX_PAGE:
        raise BadUserInput(f"first must be between 0 and {MAX_PAGE}")
    after_id = None
    if after is not None:
        try:
            after_id = UUID(after)
        except ValueError:
            raise BadUserInput(f"{after!r} is not a valid cursor (a schedule id)") from None
    rows = await db.all(queries.PAGE, tenant_id=tenant_id, after=after_id, first=first)
    return [to_schedule(r) for r in rows]


def input_of(schedule: ScheduleRecord, cipher: AESGCM | None = None) -> dict[str, object]:
    """A copy of the schedule's input: each run gets its own. A tenant that encrypts has it
    sealed (`services.sealing`): opened with `cipher`, to be sealed again as each run's."""
    return dict(json.loads(json.dumps(sealing.open_value(cipher, schedule.input))))
