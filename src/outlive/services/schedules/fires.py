"""The schedules' clock: each occurrence makes at most one run (contract §7 "Schedules").

The relay's passes drive it (`services.relay`: no sweeper of its own). A pass takes the earliest
due schedules, each tenant's first before anyone's second, and fires them tenant by tenant: one
transaction per tenant locks that tenant's due schedules (`FOR UPDATE SKIP LOCKED`: any number of
relays fire each once), starts the run of each due occurrence and moves each cursor past it.
The cursor and the runs commit together, and a run carries `(schedule_id, scheduled_for)`,
unique in PostgreSQL: a worker killed mid-pass, a second worker, a Redis flush or a PostgreSQL
restart can delay an occurrence but never make it run twice. An occurrence whose fire time is
further behind than the catch-up window (at least `GRACE_S`) is missed, counted and skipped; the
others still run, once each, in order. "Now" is what the `TimeSource` given reads (`db.ports`:
PostgreSQL's `now()`, ahead of it only under a test harness's fake clock).

A run starts under the schedule's key and overlap policy, its input a copy of the schedule's,
`scheduledFor` its occurrence: REJECT skips the occurrence while the key's last run is active,
ENQUEUE queues it behind, CANCEL_PREVIOUS replaces it, RETURN_EXISTING lets the active run stand
for it, SIGNAL_EXISTING hands it the input as the signal `input` (`services.starts`).
`triggerSchedule` starts one run now under the same rules; `backfillSchedule` gives every
occurrence in [from, to) that has no run yet a run of its own, queued in the key's line (ENQUEUE,
whatever the policy: each one runs, oldest first).
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING
from uuid import UUID

from outlive.db.models import RunConflict
from outlive.db.ports import REAL_TIME, RunInstances, TimeSource
from outlive.db.tx import Row, Sessions, Unit
from outlive.errors import BadUserInput, DomainError, NotFound, RunActive
from outlive.services import runs, sealing, starts
from outlive.services.runs.keys import StartOptions
from outlive.services.schedules import cron, input_of, queries
from outlive.services.schedules.records import ScheduleRecord, to_schedule
from outlive.telemetry import metrics

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

log = logging.getLogger(__name__)

GRACE_S = 10.0  # a fire this late is on time, whatever the catch-up window
MAX_PER_PASS = 100  # occurrences of one schedule one pass starts at most (the rest: next pass)
MAX_BACKFILL = 1000
TENANTS_AT_ONCE = 4  # tenants fired at once by one pass (a connection each)
_TICK = timedelta(microseconds=1)


async def fire_due(
    sessions: Sessions,
    instances: RunInstances,
    batch: int,
    *,
    kek: AESGCM | None = None,
    time: TimeSource = REAL_TIME,
) -> int:
    """Fire up to `batch` due schedules (see the module's docstring), `TENANTS_AT_ONCE` tenants'
    transactions at a time (each waits on PostgreSQL most of its time); how many fired. `kek`:
    the deployment key; the runs of a tenant that encrypts have their inputs sealed. `time`:
    what "due" is read against (the real time but in a test harness)."""
    ahead_s = time.ahead().total_seconds()
    tenants = await sessions.all(
        queries.DUE, window=batch * queries.WINDOW, batch=batch, ahead_s=ahead_s
    )
    turns = asyncio.Semaphore(TENANTS_AT_ONCE)

    async def fire_tenant(row: Row) -> int:
        async with turns:
            try:
                async with sessions.unit(row["tenant_id"]) as uow:
                    cipher = await sealing.cipher_of(uow, kek, row["tenant_id"])
                    ids = list(row["ids"])
                    return await _fire_tenant(uow, ids, instances, cipher, ahead_s)
            except DomainError as exc:  # the queue is away: its runs go to the relay as ever
                log.warning("schedules of tenant %s: %s", row["tenant_id"], exc.message)
                return 0

    return sum(await asyncio.gather(*(fire_tenant(row) for row in tenants)))


@dataclass(frozen=True, slots=True)
class _Plan:
    schedule: ScheduleRecord
    due: list[datetime]  # the occurrences to start now, in order
    next_occurrence: datetime  # where its cursor goes
    next_fire_at: datetime
    fired_at: datetime | None


async def _fire_tenant(
    uow: Unit, ids: list[UUID], instances: RunInstances, cipher: AESGCM | None, ahead_s: float
) -> int:
    """One tenant's due schedules among `ids`, locked: each due occurrence's run started, each
    cursor moved past them, in this transaction. A constant number of statements: the lock, one
    INSERT for every occurrence whose key is free and that has no run yet, one UPDATE for every
    cursor; only an occurrence the INSERT left out (its key has an active run, or it already has
    a run) takes startRun's own path, under its schedule's policy."""
    taken = await uow.all(queries.TAKE, ids=ids, tenant_id=uow.require_tenant(), ahead_s=ahead_s)
    plans = [_plan(to_schedule(found), found["db_now"]) for found in taken]
    due = [p for p in plans if p.due]
    made = await _insert_at_once(uow, due, instances, cipher)
    for p in due:
        rest = [at for at in p.due if (p.schedule.id, at) not in made]
        await start_occurrences(uow, p.schedule, rest, instances=instances, cipher=cipher)
    if plans:
        await uow.all(
            queries.MOVE_MANY,
            ids=[p.schedule.id for p in plans],
            occurrences=[p.next_occurrence for p in plans],
            fires=[p.next_fire_at for p in plans],
            fired=[p.fired_at for p in plans],
        )
    for p in plans:
        uow.nudge("schedule.updated", p.schedule.id)
    return len(plans)


async def _insert_at_once(
    uow: Unit, due: list[_Plan], instances: RunInstances, cipher: AESGCM | None
) -> set[tuple[UUID | None, datetime | None]]:
    """The runs of a batch's occurrences, in one statement, but for those whose key has an
    active run or that have a run already (the caller starts or skips them one by one); the
    occurrences it made."""
    made = await runs.insert_runs(
        uow,
        [
            (p.schedule.agent, input_of(p.schedule, cipher), _options(p.schedule, at))
            for p in due
            for at in p.due
        ],
        instances,
        cipher=cipher,
    )
    metrics.SCHEDULE_FIRES.labels("started").inc(len(made))
    return {(m.run.schedule_id, m.run.scheduled_for) for m in made}


def _options(
    schedule: ScheduleRecord, at: datetime, on_conflict: RunConflict | None = None
) -> StartOptions:
    return StartOptions(
        key=schedule.key,
        on_conflict=on_conflict or schedule.on_conflict,
        tags=schedule.tags,
        schedule_id=schedule.id,
        scheduled_for=at,
    )


def _plan(schedule: ScheduleRecord, now: datetime) -> _Plan:
    """What firing a locked schedule at `now` does: its due occurrences (those missed by more
    than the catch-up window counted and skipped) and where its cursor goes."""
    assert schedule.next_occurrence is not None  # noqa: S101 (TAKE: next_fire_at <= now)
    expression, zone = cron.check_cron(schedule.cron), cron.check_timezone(schedule.timezone)
    window = timedelta(seconds=max(float(schedule.catchup_window_seconds), GRACE_S))
    due: list[datetime] = []
    missed = 0
    walk = cron.occurrences(expression, zone, schedule.next_occurrence - _TICK)
    while True:
        at = next(walk)
        fire_at = at + cron.jitter(schedule.id, at, schedule.jitter_seconds)
        if fire_at > now or len(due) >= MAX_PER_PASS:
            break
        if now - fire_at <= window:
            due.append(at)
            metrics.SCHEDULE_LATENESS.observe(max(0.0, (now - fire_at).total_seconds()))
            continue
        missed += 1
        if now - window - fire_at > timedelta(days=1):  # a long outage: on to the window's start
            walk = cron.occurrences(expression, zone, now - window - timedelta(hours=2))
    if missed:
        metrics.SCHEDULE_FIRES.labels("missed").inc(missed)
        log.warning(
            "schedule %s: %d occurrence(s) missed past its catch-up window", schedule.id, missed
        )
    return _Plan(schedule, due, at, fire_at, now if due else None)


async def start_occurrences(
    uow: Unit,
    schedule: ScheduleRecord,
    occurrences: list[datetime],
    *,
    instances: RunInstances,
    on_conflict: RunConflict | None = None,
    cipher: AESGCM | None = None,
) -> list[runs.StartedRun]:
    """Start the run of each occurrence that has none yet (the caller holds the schedule's row
    lock), under the schedule's key and `on_conflict` (None: its own). REJECT while the key's
    run is active skips the occurrence. The runs started or met, in order."""
    if not occurrences:
        return []
    rows = await uow.all(queries.HAVE_RUNS, id=schedule.id, at=occurrences)
    have = {r["scheduled_for"] for r in rows}
    done: list[runs.StartedRun] = []
    for at in occurrences:
        if at in have:
            continue
        try:
            started = await starts.start(
                uow,
                agent=schedule.agent,
                params=input_of(schedule, cipher),
                instances=instances,
                options=_options(schedule, at, on_conflict),
                cipher=cipher,
            )
        except RunActive:
            metrics.SCHEDULE_FIRES.labels("skipped").inc()
            continue
        metrics.SCHEDULE_FIRES.labels("started" if started.created else "met").inc()
        done.append(started)
    return done


async def _locked(
    uow: Unit, schedule_id: UUID, time: TimeSource
) -> tuple[ScheduleRecord, datetime]:
    found = await uow.one(
        queries.LOCK,
        id=schedule_id,
        tenant_id=uow.require_tenant(),
        ahead_s=time.ahead().total_seconds(),
    )
    if found is None:
        raise NotFound(f"no schedule {schedule_id}")
    return to_schedule(found), found["db_now"]


async def trigger_schedule(
    uow: Unit,
    schedule_id: UUID,
    *,
    instances: RunInstances,
    cipher: AESGCM | None = None,
    time: TimeSource = REAL_TIME,
) -> runs.StartedRun:
    """One run now (`scheduledFor` now), under the schedule's key and overlap policy: REJECT
    while its last run is active answers `RUN_ACTIVE`. Paused or not."""
    schedule, now = await _locked(uow, schedule_id, time)
    options = _options(schedule, now)
    started = await starts.start(
        uow,
        agent=schedule.agent,
        params=input_of(schedule, cipher),
        instances=instances,
        options=options,
        cipher=cipher,
    )
    metrics.SCHEDULE_FIRES.labels("started" if started.created else "met").inc()
    uow.nudge("schedule.updated", schedule.id)
    return started


async def backfill_schedule(
    uow: Unit,
    schedule_id: UUID,
    start: datetime,
    end: datetime,
    *,
    instances: RunInstances,
    cipher: AESGCM | None = None,
    time: TimeSource = REAL_TIME,
) -> int:
    """Give each occurrence in [start, end) that has no run yet a run, queued in the key's line
    (oldest first); occurrences after now are left to the clock. How many runs it made: a
    repeat makes none."""
    if start.tzinfo is None or end.tzinfo is None:
        raise BadUserInput("from and to carry a UTC offset")
    if start >= end:
        raise BadUserInput("to must be after from")
    if start.year < 2000 or end - start > timedelta(days=366):
        raise BadUserInput("a backfill spans at most 366 days, from 2000 on")
    schedule, now = await _locked(uow, schedule_id, time)
    expression, zone = cron.check_cron(schedule.cron), cron.check_timezone(schedule.timezone)
    found = cron.between(expression, zone, start, min(end, now + _TICK), limit=MAX_BACKFILL)
    if len(found) > MAX_BACKFILL:
        raise BadUserInput(f"a backfill makes at most {MAX_BACKFILL} runs: ask for a shorter span")
    started = await start_occurrences(
        uow, schedule, found, instances=instances, on_conflict=RunConflict.ENQUEUE, cipher=cipher
    )
    made = sum(1 for s in started if s.created)
    if made:
        uow.nudge("schedule.updated", schedule.id)
    return made
