"""A wake that comes while the delivery that parked the run is still finishing is not lost.

The run's saq job key is its id, and saq enqueues a key once: a run parked WAITING and woken
(here by a signal) before the delivery that parked it is over is handed to the queue while that
delivery still holds the key, and the hand-off is a no-op. Without `after_parking` the run then
sat QUEUED, admitted and with no job, until the relay's first look 10 s later (the p99 of a
child's result reaching its parent was 11.7 s in `bench/children.py`). Here the window is held
open on purpose: the delivery does not end until the wake has been handed (and lost).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.jobs.graceful import GracefulWorker
from outlive.jobs.run_instances import RUN_TASK
from outlive.runtime import Queues
from outlive.services import runs as runs_service
from outlive.worker import WorkerDeps, WorkerHost
from tests.support import Api, NudgeWatch, TenantHandle, settled
from tests.waits.test_signals import demo, signal

pytestmark = pytest.mark.timeout(60)


class WakeBeforeTheDeliveryEnds(WorkerHost):
    """The runs worker's task, with a pause after the attempt that parked: `release` lets the
    delivery end (and saq finish its job)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings, concurrency=2)
        self.parked = asyncio.Event()
        self.release = asyncio.Event()

    def saq_workers(self, queues: Queues, deps: WorkerDeps) -> list[GracefulWorker]:
        workers = super().saq_workers(queues, deps)
        task = workers[0].functions[RUN_TASK]

        async def held(ctx: Any, **kwargs: Any) -> Any:
            result = await task(ctx, **kwargs)
            if ctx.get("parked") and not self.parked.is_set():
                self.parked.set()
                await self.release.wait()
            return result

        workers[0].functions[RUN_TASK] = held
        return workers


async def test_a_run_woken_before_its_parking_delivery_ends_is_handed_again(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    host = WakeBeforeTheDeliveryEnds(settings)
    await host.start()
    try:
        assert settings.redis_url is not None
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            run_id = await demo(api, tenant, awaitSignal="go")
            await asyncio.wait_for(host.parked.wait(), 30)  # WAITING, its delivery not over
            accepted = await signal(api, tenant.token, run_id, "go", {"n": 1})
            assert accepted["accepted"] is True
            woken = await watch.until(
                run_id,
                lambda r: r.status == RunStatus.QUEUED and r.dispatched_at is not None,
                timeout=10,
            )  # woken, admitted, and handed to a queue that still held the job: a no-op
            assert woken.attempt == 1
            host.release.set()
            # The relay's first look at the row is 10 s after its admission: well before that,
            # the run must have been handed again by the delivery that parked it.
            done = await watch.until(run_id, settled, timeout=6)
    finally:
        host.release.set()
        await host.stop()
    assert done.status == "SUCCEEDED", done.error
    events = await runs_service.list_events(sessions, RunId(done.id), first=100)
    assert [e.data for e in events if e.type == "resumed"] == [{"by": "signal"}]
