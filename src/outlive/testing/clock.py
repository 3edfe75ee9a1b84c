"""The harness's clock: time moves forward by moving every stored due time back.

Outlive keeps every timer in PostgreSQL and reads PostgreSQL's clock (`now()`): a durable sleep's
or a wait's timer (`runs.wake_at`, `run_waits.until`), a budget's period (`budget_periods`).
Nothing in the process can fake that clock, so `advance(delta)` does the equivalent: it subtracts
`delta` from each of those times of the harness's tenant, in one transaction, and wakes the
relay (NOTIFY `outlive_relay`), which then finds the timers due and resumes their runs, exactly as
it would have `delta` later. A budget's period rows move back too: the current period starts
afresh once a day (or month) has passed. `now()` is the real time plus what was skipped.

What the agent's own code reads (`datetime.now()`, `time.time()`) is not moved: code that must
see the skipped time reads it from a step or from `ctx` (durable sleeps and waits do). Retry
delays inside an attempt (a step's `retry=`, a run's `OUTLIVE_RUN_RETRY_DELAY_S`) are real
time: set them short in the harness's settings.
"""

from __future__ import annotations

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


class Clock:
    """The fake clock of one harness (one tenant)."""

    def __init__(self, connection: asyncpg.Connection, tenant_id: UUID) -> None:
        self._connection = connection  # the harness's own, open while it is
        self._tenant_id = tenant_id
        self.skipped = timedelta(0)

    def now(self) -> datetime:
        return datetime.now(UTC) + self.skipped

    async def advance(self, delta: timedelta | None = None, **units: float) -> None:
        """Move time forward by `delta` (or `timedelta(**units)`: `days=30`, `hours=1`…)."""
        step = delta if delta is not None else timedelta(**units)
        if step <= timedelta(0):
            raise ValueError("the clock only moves forward")
        connection = self._connection
        async with connection.transaction():
            for statement in SHIFTS:
                await connection.execute(statement, step, self._tenant_id)
            await connection.execute("SELECT pg_notify($1, 'runs')", RELAY_CHANNEL)
        self.skipped += step

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
