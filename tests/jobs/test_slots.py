"""An attempt waiting in-process lends its worker slot (`outlive.workflows.slots`): the worker's
own saq loops (`GracefulWorker`) on a real Redis queue, at concurrency 1, so one job holding its
slot would stop every other. And the worker's `idle` event, which `quiet` (the host's warm-up)
waits on: set only while no job is in progress, a lent slot's included."""

from __future__ import annotations

import asyncio
from collections import defaultdict
from collections.abc import AsyncIterator
from contextlib import suppress
from typing import Any
from uuid import uuid4

import pytest

from outlive.jobs.graceful import GracefulWorker, quiet
from outlive.jobs.queues import create_queue
from outlive.workflows.slots import SlotLender
from tests.support import Servers

WAIT_S = 10.0  # what a test waits for something that must happen


class Stage:
    """The jobs' progress, as events: `"<job> started"`, `"<job> lent"`, `"<job> back"`, and
    the events the test sets to move a job on: `"<job> wakes"`, `"<job> ends"`."""

    def __init__(self) -> None:
        self.events: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.order: list[str] = []

    def mark(self, what: str) -> None:
        self.order.append(what)
        self.events[what].set()

    async def reached(self, what: str) -> None:
        async with asyncio.timeout(WAIT_S):
            await self.events[what].wait()

    def let(self, what: str) -> None:
        self.events[what].set()

    async def not_yet(self, what: str) -> None:
        """`what` has not happened half a second on (it must not happen by itself)."""
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await self.events[what].wait()


async def job(ctx: dict[str, Any], *, name: str) -> None:
    stage: Stage = ctx["stage"]
    stage.mark(f"{name} started")
    if name.startswith("sleeper"):
        async with ctx["lender"].lent(WAIT_S):
            stage.mark(f"{name} lent")
            await stage.events[f"{name} wakes"].wait()
        stage.mark(f"{name} back")
    await stage.events[f"{name} ends"].wait()
    stage.mark(f"{name} done")


class Rig:
    def __init__(self, worker: GracefulWorker, lender: SlotLender, stage: Stage) -> None:
        self.worker, self.lender, self.stage = worker, lender, stage

    async def enqueue(self, name: str) -> None:
        await self.worker.queue.enqueue("job", name=name, key=name)

    async def lent_beside(self, other: str) -> None:
        """A sleeper lends the one slot, and `other` starts in it."""
        await self.enqueue("sleeper")
        await self.stage.reached("sleeper lent")
        await self.enqueue(other)
        await self.stage.reached(f"{other} started")

    def loops(self) -> int:
        return sum(1 for t in self.worker.tasks if t.get_name() == "process")


@pytest.fixture
async def rig(servers: Servers, request: pytest.FixtureRequest) -> AsyncIterator[Rig]:
    """The worker at concurrency 1, lending at most 4 slots; with no overdraft unless the test
    asks for one (`indirect` parametrize)."""
    queue = create_queue(servers.redis_url, f"slots-{uuid4().hex}")
    overdraft = getattr(request, "param", 0)
    lender, stage = SlotLender(most=4, overdraft=overdraft), Stage()
    worker = GracefulWorker(
        queue, functions=[("job", job)], concurrency=1, lender=lender, timers={"sweep": 3600}
    )
    worker.SIGNALS = []
    worker.context.update(stage=stage, lender=lender)
    await queue.connect()
    running = asyncio.create_task(worker.start())
    try:
        yield Rig(worker, lender, stage)
    finally:
        for event in list(stage.events.values()):
            event.set()
        await worker.stop()
        running.cancel()
        with suppress(asyncio.CancelledError):
            await running
        keys = await queue.redis.keys(f"saq:{queue.name}*")
        if keys:
            await queue.redis.delete(*keys)
        await queue.disconnect()


async def test_a_lent_slot_runs_another_job_and_the_loops_come_back_to_the_concurrency(
    rig: Rig,
) -> None:
    stage = rig.stage
    await rig.lent_beside("other")  # the one slot is the sleeper's: only a lent one runs this
    assert rig.lender.lent_now == 1
    stage.let("other ends")
    await stage.reached("other done")
    stage.let("sleeper wakes")  # an idle loop is there: its slot is taken back at once
    await stage.reached("sleeper back")
    stage.let("sleeper ends")
    await stage.reached("sleeper done")
    for name in ("first", "second"):
        await rig.enqueue(name)
    await stage.reached("first started")
    # one loop ends after its job: at concurrency 1 the second waits for the first
    await stage.not_yet("second started")
    assert rig.loops() == 1
    stage.let("first ends")
    stage.let("second ends")
    await stage.reached("second done")


async def test_a_lent_slot_is_taken_back_only_once_a_job_ends_when_every_slot_is_busy(
    rig: Rig,
) -> None:
    stage = rig.stage
    await rig.lent_beside("busy")
    stage.let("sleeper wakes")  # no idle loop: the sleeper waits for the busy job's slot
    await stage.not_yet("sleeper back")
    await rig.enqueue("queued")  # the busy job's slot goes to the sleeper, not to this
    stage.let("busy ends")
    await stage.reached("sleeper back")
    assert "queued started" not in stage.order
    stage.let("sleeper ends")
    stage.let("queued ends")
    await stage.reached("queued done")
    assert stage.order.index("sleeper done") < stage.order.index("queued started")
    assert rig.loops() == 1


@pytest.mark.parametrize("rig", [1], indirect=True)
async def test_an_attempt_coming_back_goes_over_the_count_up_to_the_overdraft(rig: Rig) -> None:
    """Overdraft 1: with every slot busy, the first attempt back goes on at once, the second
    waits for a job to end; the loops come back to the concurrency as the jobs end."""
    stage = rig.stage
    await rig.lent_beside("sleeper2")  # sleeper2 runs in the slot sleeper lent
    await stage.reached("sleeper2 lent")
    await rig.enqueue("busy")  # in the slot sleeper2 lent: every loop holds a job
    await stage.reached("busy started")
    stage.let("sleeper wakes")
    await stage.reached("sleeper back")  # at once, one over the count
    stage.let("sleeper2 wakes")
    await stage.not_yet("sleeper2 back")  # the overdraft is spent: it waits for a job's end
    stage.let("busy ends")
    await stage.reached("sleeper2 back")
    for name in ("sleeper", "sleeper2"):
        stage.let(f"{name} ends")
        await stage.reached(f"{name} done")
    await rig.enqueue("first")
    await rig.enqueue("second")
    await stage.reached("first started")
    await stage.not_yet("second started")  # one loop left: the concurrency
    assert rig.loops() == 1
    stage.let("first ends")
    stage.let("second ends")
    await stage.reached("second done")


async def test_a_worker_lends_at_most_its_count(rig: Rig) -> None:
    stage = rig.stage
    for i in range(5):  # the lender's most is 4: the fifth sleeper keeps its slot
        await rig.enqueue(f"sleeper{i}")
        if i < 4:
            await stage.reached(f"sleeper{i} lent")
    await stage.reached("sleeper4 lent")
    assert rig.lender.lent_now == 4
    await rig.enqueue("other")
    await stage.not_yet("other started")
    for i in range(5):
        stage.let(f"sleeper{i} wakes")
        stage.let(f"sleeper{i} ends")
    stage.let("other ends")
    await stage.reached("other done")
    assert rig.lender.lent_now == 0


async def test_the_worker_is_idle_only_while_no_job_is_in_progress(rig: Rig) -> None:
    stage, idle = rig.stage, rig.worker.idle
    assert idle.is_set()  # started, polling, nothing to do
    await rig.lent_beside("other")  # the sleeper lent its slot: two jobs in progress
    assert not idle.is_set()
    stage.let("other ends")
    await stage.reached("other done")
    assert not idle.is_set()  # the sleeper still holds a job
    stage.let("sleeper wakes")
    stage.let("sleeper ends")
    await stage.reached("sleeper done")
    async with asyncio.timeout(WAIT_S):
        await idle.wait()
    assert rig.worker.jobs_begun == 2


async def test_quiet_waits_out_a_job_then_a_quiet_period(rig: Rig) -> None:
    stage, loop = rig.stage, asyncio.get_running_loop()
    await rig.enqueue("held")
    await stage.reached("held started")
    waiting = asyncio.create_task(quiet([rig.worker], 0.3))
    with pytest.raises(TimeoutError):  # half a second on, the job still in progress
        async with asyncio.timeout(0.5):
            await asyncio.shield(waiting)
    stage.let("held ends")
    await stage.reached("held done")
    ended = loop.time()
    async with asyncio.timeout(WAIT_S):
        await waiting
    assert loop.time() - ended >= 0.3  # then quiet for the whole period
