"""The harness's clock: time moves forward by moving every stored due time back.

Outlive keeps every timer in PostgreSQL and reads PostgreSQL's clock (`now()`): a durable sleep's
or a wait's timer (`runs.wake_at`, `run_waits.until`), a budget's period (`budget_periods`).
Nothing in the process can fake that clock, so `advance(delta)` does the equivalent: it subtracts
`delta` from each of those times of the harness's tenant, in one transaction, and wakes the
relay (NOTIFY `outlive_relay`), which then finds the timers due and resumes their runs, exactly as
it would have `delta` later. A budget's period rows move back too: the current period starts
afresh once a day (or month) has passed. `now()` is the real time plus what was skipped.

Schedules cannot be moved that way: an occurrence is a wall time in a zone ("9:00 in Paris"), not
a stored delay. So the clock is also the schedules' time source (`db.ports.TimeSource`, given to
the harness's API and worker): their clock reads PostgreSQL's `now()` plus `skipped`. `advance`
walks the span from one fire time to the next: it waits for the runs in flight to park or
settle, moves to the fire time (the timers with it), lets the worker's relay fire what is due
there, and goes on. So each occurrence in the span fires once, on time, under its schedule's
overlap policy and catch-up window, as it would have with the real clock.

What the agent's own code reads (`datetime.now()`, `time.time()`) is not moved: code that must
see the skipped time reads it from a step or from `ctx` (durable sleeps and waits do). Retry
delays inside an attempt (a step's `retry=`, a run's `OUTLIVE_RUN_RETRY_DELAY_S`) are real
time: set them short in the harness's settings.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta
from uuid import UUID

import asyncpg

from outlive.services.runs.wake_queries import SKIP_TIMERS

RELAY_CHANNEL = "outlive_relay"  # `services.relay.queries.CHANNEL`

# Each statement moves one kind of due time of the tenant ($2) back by $1.
SHIFTS = (
    SKIP_TIMERS,
    "UPDATE run_waits w SET until = w.until - CAST($1 AS interval) FROM runs r"
    " WHERE r.id = w.run_id AND r.tenant_id = $2 AND w.resolved_at IS NULL"
    " AND w.until IS NOT NULL",
    "UPDATE budget_periods p SET period_start = p.period_start - CAST($1 AS interval)"
    " FROM budgets b WHERE b.id = p.budget_id AND b.tenant_id = $2",
)


# How far ahead (seconds, on the schedules' time: $2 ahead of PostgreSQL's) the tenant's ($1)
# earliest schedule fires; NULL without one.
NEXT_FIRE = (
    "SELECT extract(epoch FROM min(next_fire_at) - now() - CAST($2 AS interval)) FROM schedules"
    " WHERE tenant_id = $1 AND next_fire_at IS NOT NULL"
)
# Whether the tenant has a schedule due that the relay has not fired yet.
UNFIRED = (
    "SELECT EXISTS (SELECT 1 FROM schedules WHERE tenant_id = $1"
    " AND next_fire_at <= now() + CAST($2 AS interval))"
)
# Whether the tenant has runs in flight: executing, queued (but for a pause or a debounce's
# hold), or whose timer is due.
IN_FLIGHT = (
    "SELECT EXISTS (SELECT 1 FROM runs WHERE tenant_id = $1 AND (status = 'RUNNING'"
    " OR (status = 'QUEUED' AND paused_at IS NULL AND coalesce(not_before <= now(), true))"
    " OR (status = 'WAITING' AND wake_at <= now())))"
)
POLL_S = 0.005
SETTLE_S = 30.0  # how long runs in flight may take before the clock moves on past them


class Clock:
    """The fake clock of one harness (one tenant); the schedules' time source
    (`db.ports.TimeSource`): `ahead()` is `skipped`."""

    def __init__(self, connection: asyncpg.Connection, tenant_id: UUID) -> None:
        self._connection = connection  # the harness's own, open while it is
        self._tenant_id = tenant_id
        self.skipped = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skipped

    def ahead(self) -> timedelta:
        return self.skipped

    async def advance(self, delta: timedelta | None = None, **units: float) -> None:
        """Move time forward by `delta` (or `timedelta(**units)`: `days=30`, `hours=1`…),
        stopping at each schedule's fire time on the way for the worker to fire it."""
        step = delta if delta is not None else timedelta(**units)
        if step <= timedelta(0):
            raise ValueError("the clock only moves forward")
        end = self.skipped + step
        while (fire := await self.next_fire()) is not None and self.skipped + fire <= end:
            await self._settle()  # the real time between two fires lets the runs go on
            await self._shift(fire)
            await self._fired()
        await self._shift(end - self.skipped)

    async def next_fire(self) -> timedelta | None:
        """How far ahead the earliest fire of the tenant's schedules is (0 if due); None
        without one."""
        left = await self._connection.fetchval(NEXT_FIRE, self._tenant_id, self.skipped)
        return None if left is None else timedelta(seconds=max(float(left), 0.0))

    async def _shift(self, step: timedelta) -> None:
        """Every timer of the tenant `step` earlier and the schedules' time `step` later; the
        relay woken."""
        connection = self._connection
        async with connection.transaction():
            if step > timedelta(0):
                for statement in SHIFTS:
                    await connection.execute(statement, step, self._tenant_id)
            await connection.execute("SELECT pg_notify($1, 'runs')", RELAY_CHANNEL)
        self.skipped += max(step, timedelta(0))

    async def _fired(self) -> None:
        """Until the worker's relay has fired every due schedule of the tenant."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_S
        while await self._connection.fetchval(UNFIRED, self._tenant_id, self.skipped):
            if loop.time() > deadline:
                raise AssertionError(f"the worker fired no due schedule in {SETTLE_S:g} s")
            await asyncio.sleep(POLL_S)

    async def _settle(self) -> None:
        """Until the tenant has no run in flight (or `SETTLE_S` has passed: a run that long is
        still running when the next occurrence comes, as it would be in production)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + SETTLE_S
        while loop.time() < deadline:
            if not await self._connection.fetchval(IN_FLIGHT, self._tenant_id):
                return
            await asyncio.sleep(POLL_S)

    async def next_timer(self) -> timedelta | None:
        """How far ahead the earliest timer of the tenant's WAITING runs is (0 if due); None
        without one."""
        left: float | None = await self._connection.fetchval(
            "SELECT extract(epoch FROM min(wake_at) - now()) FROM runs"
            " WHERE tenant_id = $1 AND status = 'WAITING'",
            self._tenant_id,
        )
        return None if left is None else timedelta(seconds=max(float(left), 0.0))

    async def skip_to_next_timer(self) -> bool:
        """Advance to the earliest timer (a millisecond past it); False when there is none."""
        left = await self.next_timer()
        if left is None:
            return False
        await self.advance(left + timedelta(milliseconds=1))
        return True
