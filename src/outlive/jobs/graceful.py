"""saq's worker as Outlive runs it: its shutdown grace spent on jobs only, a cron job enqueued
once per fire time, the queues' schedule pass given by the host, a slot lent while an attempt
waits, and an event that says when it holds no job (`idle`: the host's warm-up waits for it).

`outlive.worker.WorkerHost` makes two of them, the runs worker and the jobs worker.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections.abc import Sequence
from datetime import datetime
from typing import Any, cast

from croniter import croniter
from saq import Status, Worker

from outlive.jobs.schedule_pass import SchedulePass
from outlive.workflows.drains import Drains
from outlive.workflows.slots import SlotLender

log = logging.getLogger(__name__)

CRON_RENEW_S = 60.0  # a cron job not yet due is enqueued again this often


class GracefulWorker(Worker[Any]):
    """saq's worker with its shutdown grace spent on jobs only, and no warning for idle work.

    saq waits the grace period for every task it owns, idle ones included, and warns that they
    "did not finish within the shutdown grace period". An idle task never finishes by itself: a
    dequeue waits for work with no timeout, and an upkeep loop sleeps between its passes. So an
    idle worker took `OUTLIVE_SHUTDOWN_GRACE_S` to stop, and then every stop warned. Here the
    grace goes to the job functions still executing; then the tasks that hold no job (a dequeue
    that got nothing, the upkeep loops) are cancelled, which loses nothing, and a job's
    bookkeeping once its function returned is saq's to finish. The runs worker has no grace: all
    its tasks are cancelled at once, as saq would, its attempts releasing their runs (see
    `outlive.workflows.runs`); only a task that overruns the cancellation deadline is left to
    saq's warning."""

    def __init__(
        self,
        *args: Any,
        lender: SlotLender | None = None,
        drains: tuple[Drains, float] | None = None,
        passes: SchedulePass | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self._passes = self.queue.schedule if passes is None else passes
        self._drains = drains  # the runs worker: its drainable steps, and their grace
        self._dequeuing: set[asyncio.Task[Any]] = set()  # process loops that hold no job
        self._upkeep: set[asyncio.Task[Any]] = set()
        self._lender = lender  # its attempts lend their slots while they wait (`workflows.slots`)
        self._cron_next: dict[Any, tuple[float, float]] = {}  # a cron job: (fires, renewed) at
        self.idle = asyncio.Event()  # set while no job of this worker's is in progress
        self.idle.set()
        self.jobs_begun = 0  # jobs this worker has begun, ever (`quiet` compares two readings)
        self._in_progress = 0
        if lender is not None:
            lender.bind(self)

    def add_loop(self) -> None:
        self._process()

    def idle_loops(self) -> int:
        return len(self._dequeuing)

    def stopping(self) -> bool:
        return self.event.is_set()

    def _process(self, previous_task: asyncio.Task[Any] | None = None) -> None:
        """saq's loop restart: a loop whose slot a lent attempt takes back ends here."""
        lender = self._lender
        if previous_task is not None and lender is not None and lender.loop_ends():
            self.tasks.discard(previous_task)
            return
        super()._process(previous_task)

    async def schedule(self, lock: float = 1) -> None:
        """saq's, with each cron job enqueued once per fire time, not on every pass, and the
        queue's lock in whole seconds below the pass's period (`SCHEDULE_S`, given as `lock`).

        saq enqueues every cron job on every `schedule` pass (each second): a Redis round trip
        per job a second, a no-op but for the first of its period (the job's key), for jobs
        that fire every five minutes at most. Here a cron job is enqueued once its last fire
        time has come, on every pass until that takes (the key is free once the fired job
        finished, as with saq), and besides every `CRON_RENEW_S`, which puts a job Redis lost
        back within that long (Redis holds no truth). Which fire time: `_fire_time`. Then the
        queues' pass (scheduled jobs now due: retries, deliveries later), every second:
        `passes`, the worker's own queue's unless given (`outlive.jobs.schedule_pass`: the jobs
        worker's covers both queues)."""
        now = time.time()
        for cron_job in self.cron_jobs:
            fires, renew = self._cron_next.get(cron_job.function, (0.0, 0.0))
            if now < fires and now < renew:
                continue
            kwargs = dict(cron_job.__dict__)
            function = kwargs.pop("function").__qualname__
            key = kwargs["key"] = f"cron:{function}" if kwargs.pop("unique") else None
            cron = kwargs.pop("cron")
            at = fires if now < fires else self._fire_time(cron, fires, now)  # or a renewal
            options = {k: v for k, v in kwargs.items() if v is not None}
            if await self.queue.enqueue(function, scheduled=int(at), **options) is not None:
                self._cron_next[cron_job.function] = (at, now + CRON_RENEW_S)
            elif held := await self._held_fire(key):
                self._cron_next[cron_job.function] = (held, now + CRON_RENEW_S)
            # else the key was freed meanwhile: again on the next pass
        if job_ids := await self._passes(max(1, math.floor(lock))):
            log.info("Scheduled %s", job_ids)

    def _fire_time(self, cron: str, fired: float, now: float) -> float:
        """The fire time to enqueue once `fired` (the last known, 0 if none) has come: the next
        one after now, unless one passed since `fired`: that one, late. A fire time passes
        unenqueued when the job before it still held the key then (saq keeps one job per cron
        key): it moves to the queue on a schedule pass up to a second after its time, and the
        next is enqueued on a pass once it finished, so a tick that fires every few seconds, or
        a task that overruns its period, met that. Before, the next one after now was enqueued
        and the passed one skipped. Only the last passed one runs: a tick's tasks are sweeps,
        and one run does the work of those it stands for."""
        start = datetime.fromtimestamp(now, self.cron_tz)
        if fired and (passed := croniter(cron, start).get_prev()) > fired:
            return float(passed)
        return float(croniter(cron, start).get_next())

    async def _held_fire(self, key: str | None) -> float:
        """The fire time of the job that holds `key`, 0 if none does: enqueued by another worker
        of the queue (or by this process before it restarted), or the fired job still at work.
        Without this look each further worker retried the enqueue on every pass until the fire
        time, a Redis round trip a second per cron job (bench/cells.py counted 1.3 a second per
        cell); and a worker that knows the last fire time can enqueue one that passed."""
        job = None if key is None else await self.queue.job(key)
        if job is None or job.status not in (Status.QUEUED, Status.ACTIVE):
            return 0.0
        return float(job.scheduled)

    async def upkeep(self) -> list[asyncio.Task[None]]:
        tasks = await super().upkeep()
        self._upkeep.update(tasks)
        return tasks

    async def process(self) -> bool:
        task = asyncio.current_task()
        assert task is not None  # noqa: S101 (a coroutine run as a task by saq)
        self._dequeuing.add(task)
        try:
            return await super().process()
        finally:
            if task in self._dequeuing:  # it got no job
                self._dequeuing.discard(task)
            else:  # its job is over
                self._in_progress -= 1
                if not self._in_progress:
                    self.idle.set()

    async def _before_process(self, ctx: Any) -> None:
        self._dequeuing.discard(cast("asyncio.Task[Any]", asyncio.current_task()))  # got a job
        self._in_progress += 1
        self.jobs_begun += 1
        self.idle.clear()
        await super()._before_process(ctx)

    async def stop(self) -> None:
        self.event.set()  # no new process loops
        if self._drains is not None:  # model steps in flight finish first, within their grace
            drains, grace_s = self._drains
            unfinished = await drains.drain(grace_s)
            if unfinished:
                log.warning("%s step(s) still in flight after %gs: cancelled", unfinished, grace_s)
        grace = self._shutdown_grace_period_s  # saq has no public accessor
        deadline = asyncio.get_running_loop().time() + (grace or 0)
        if grace:
            busy = [c["task"] for c in self.job_task_contexts.values() if not c["task"].done()]
            if busy:
                await asyncio.wait(busy, timeout=grace)
        # No grace (the runs worker): every task goes at once, the attempts releasing their runs.
        idle = (self._dequeuing | self._upkeep) & self.tasks if grace else set(self.tasks)
        for task in idle:
            task.cancel()
        if idle:  # one that overruns the deadline is left to saq, which warns about it
            done, _ = await asyncio.wait(idle, timeout=self._cancellation_hard_deadline_s + 1)
            self.tasks.difference_update(done)
        if grace and self.tasks:  # the bookkeeping of the jobs that finished, in what is left
            left = max(deadline - asyncio.get_running_loop().time(), 1.0)
            await asyncio.wait(set(self.tasks), timeout=left)
            self._shutdown_grace_period_s = 1
        await super().stop()


async def quiet(workers: Sequence[GracefulWorker], seconds: float) -> None:
    """Returns once none of `workers` has had a job in progress for `seconds`: each idle, and no
    job begun meanwhile (then each is idle still). (The wait itself is a timer: quiet is the
    absence of an event.)"""
    while True:
        for worker in workers:
            await worker.idle.wait()
        begun = sum(w.jobs_begun for w in workers)
        await asyncio.sleep(seconds)
        if sum(w.jobs_begun for w in workers) == begun:
            return
