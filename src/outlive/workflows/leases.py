"""The lease of an executing attempt, kept alive by heartbeats while the agent runs."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from outlive.services.runs import RunRecord, heartbeat
from outlive.workflows.deps import AttemptControl, WorkflowDeps

log = logging.getLogger(__name__)

HEARTBEATS_PER_LEASE = 3  # a heartbeat every third of the lease
BEAT_TIMEOUT_SHARE = 0.5  # a heartbeat not done within half its period counts as failed


class Lease:
    """Keeps an executing attempt's lease alive while the agent runs: in PostgreSQL (the truth: a
    live lease is what stops a second delivery from claiming the run) and in the engine (so that
    its sweep does not re-deliver a live attempt). A heartbeat that finds the run no longer held
    by this attempt cancels the agent (`lost`): someone else owns the run now. When heartbeats
    fail (PostgreSQL unreachable), the agent is cancelled (`expiring`) as soon as the next one
    could not be known to land before the lease could expire, counted on the monotonic clock
    from the start of the last heartbeat that succeeded (`since`): the server set the lease then
    or later, so the attempt stops before anyone else may claim the run, whatever the clocks say.
    The heartbeats stop before the attempt settles, so they never race its own terminal write."""

    def __init__(
        self,
        deps: WorkflowDeps,
        run: RunRecord,
        control: AttemptControl,
        *,
        since: float,
        cancelled: Callable[[], None] | None = None,
    ) -> None:
        self._deps, self._run, self._control = deps, run, control
        self._cancelled = cancelled  # told when a heartbeat finds a cancel requested
        self.since = since  # monotonic: the start of the last heartbeat (or claim) that succeeded
        self.lost = False
        self.expiring = False

    @asynccontextmanager
    async def kept(self) -> AsyncIterator[None]:
        beating = asyncio.create_task(self._keep(asyncio.current_task()))
        try:
            yield
        finally:
            beating.cancel()
            await asyncio.gather(beating, return_exceptions=True)

    async def _keep(self, attempt: asyncio.Task[Any] | None) -> None:
        every_s = self._deps.lease_s / HEARTBEATS_PER_LEASE
        timeout_s = every_s * BEAT_TIMEOUT_SHARE
        while not self.lost:
            await asyncio.sleep(every_s)
            # A hung heartbeat is left behind, not awaited: the clock below decides.
            beat = asyncio.ensure_future(self._beat())
            await asyncio.wait({beat}, timeout=timeout_s)
            if not beat.done():
                beat.add_done_callback(_consume)
                log.warning("run %s: heartbeat took over %.1fs", self._run.id, timeout_s)
            elif beat.exception() is not None:
                log.warning("run %s: heartbeat failed: %r", self._run.id, beat.exception())
            if self.lost:
                break
            if time.monotonic() + every_s + timeout_s >= self.since + self._deps.lease_s:
                self.expiring = True
                log.warning(
                    "run %s: attempt %s could not heartbeat for %.1fs; it stops before its lease"
                    " could expire",
                    self._run.id,
                    self._run.attempt,
                    time.monotonic() - self.since,
                )
                break
        if attempt is not None:
            attempt.cancel()

    async def _beat(self) -> None:
        started = time.monotonic()
        async with self._deps.sessions.unit(single_statement=True) as uow:
            beat = await heartbeat(
                uow, self._run.id, attempt=self._run.attempt, lease_s=self._deps.lease_s
            )
        if beat is None:
            self.lost = True
            return
        self.since = max(self.since, started)
        if beat.cancel_requested and self._cancelled is not None:
            self._cancelled()  # the fallback for a missed notification (or no LISTEN)
        # The engine's heartbeat only keeps its sweep away; a Redis that hangs must not stall
        # the loop that keeps the lease (the truth) alive.
        async with asyncio.timeout(self._deps.lease_s / HEARTBEATS_PER_LEASE):
            await self._control.heartbeat()


def _consume(task: asyncio.Future[None]) -> None:
    if not task.cancelled() and task.exception() is not None:
        log.debug("a late heartbeat failed: %r", task.exception())
