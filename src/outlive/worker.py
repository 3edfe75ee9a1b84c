"""The worker process: saq workers for run workflows and for the jobs queue (with cron, whose
ticks run on the jobs queue: every worker schedules them, exactly one runs each tick).

A composition root. `WorkerHost` enters the "worker" runtime (`outlive.runtime`: the engine,
Redis, the queues, the HTTP clients), derives the tasks' dependencies from it, runs the saq
workers as tasks, and stops them gracefully, then the runtime, on the same exit stack. It never
installs signal handlers of its own (saq would otherwise take SIGINT/SIGTERM from whoever embeds
it, such as uvicorn in `outlive dev`); the process that owns the signals calls `stop()`.

On stop, a run that is executing is released back to QUEUED with its attempt given back (see
`outlive.workflows.runs`); the next worker picks it up at once.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Literal, cast

from croniter import croniter
from saq import Status, Worker
from saq.types import PartialTimersDict

from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.dispatch import cron_jobs
from outlive.cron.loading import load_table
from outlive.db.ports import REAL_TIME, TimeSource
from outlive.jobs.cancels import CancelListener
from outlive.jobs.consumer import consume
from outlive.jobs.deps import JobDeps
from outlive.jobs.handlers import HANDLERS
from outlive.jobs.mailer import create_mailer
from outlive.jobs.producer import CONSUME_TASK
from outlive.jobs.relay import RelayLoop, build_relay
from outlive.jobs.run_instances import after_parking, run_workflow
from outlive.jobs.schedule_pass import SchedulePass
from outlive.jobs.telemetry import instrumented_run_task
from outlive.realtime.outputs import OutputStore
from outlive.runtime import Queues, Runtime, open_runtime
from outlive.services.limits import NamedLimits
from outlive.services.ratelimits import RateLimiter
from outlive.services.relay.lead import WakeLead
from outlive.telemetry import heap
from outlive.workflows.drains import Drains
from outlive.workflows.runs import WorkflowDeps
from outlive.workflows.slots import LEND_FACTOR, OVERDRAFT_FACTOR, SlotLender

log = logging.getLogger(__name__)

RELEASE_DEADLINE_S = 10.0  # how long a cancelled attempt may take to release its run
CRON_RENEW_S = 60.0  # a cron job not yet due is enqueued again this often (`GracefulWorker`)
# saq's schedule pass sleeps its period after each pass and locks the queue's pass for the same
# period, in whole seconds (SETEX): at exactly 1 s a pass could find its own lock still held and
# skip, a retry then moving a second late. A period a little longer than the lock never does.
SCHEDULE_S = 1.02
# saq's poll for jobs set `aborting` (by saq's `Queue.abort`), each second by default: nothing in
# Outlive aborts a saq job (a run is cancelled in PostgreSQL and told over LISTEN, `jobs.cancels`;
# a dead worker's job is repaired by the sweep's script, `jobs.queues`), so the poll only woke
# every worker of every cell once a second, and read every job running over a second. A job
# aborted by saq's own tooling is still seen, within this long.
ABORT_S = 60


@dataclass(frozen=True)
class WorkerDeps:
    """The one object under the saq context's `outlive` key (`outlive.jobs.deps.RunsContext`,
    `JobsContext`, `outlive.cron.deps.CronContext`): each task reads its part."""

    workflows: WorkflowDeps
    jobs: JobDeps
    cron: CronDeps


class WorkerHost:
    def __init__(
        self,
        settings: Settings,
        *,
        concurrency: int = 32,
        jobs_concurrency: int = 16,
        time: TimeSource = REAL_TIME,
        role: Literal["worker", "worker-cell"] = "worker",
    ) -> None:
        self.settings = settings
        # "worker-cell": a further cell of a process whose first host has the process's own
        # timers and resources (`outlive.runtime`); one host per cell served
        self.role = role
        self.time = time  # what its schedules' clock reads (a test harness's fake clock)
        self.concurrency = concurrency
        # One tenant must not hold every job slot (security review round 4, L6): its deliveries
        # and emails in flight are capped at OUTLIVE_TENANT_MAX_INFLIGHT_JOBS across workers, so
        # a worker runs at least twice that many jobs at once. Jobs wait on the network (an
        # endpoint, a mail server), so the slots cost little; a tenant whose own cap was raised
        # past half of them (`set-limits`) is the operator's choice.
        self.jobs_concurrency = max(jobs_concurrency, 2 * settings.tenant_max_inflight_jobs)
        # an attempt finishing a sleep in-process lends its slot meanwhile (`workflows.slots`)
        self.lender = SlotLender(
            most=LEND_FACTOR * concurrency, overdraft=OVERDRAFT_FACTOR * concurrency
        )
        # how far ahead the relay hands back a durable sleep, bounded by this worker's slots
        self.lead = WakeLead(
            most_s=settings.wake_lead_s,
            slots=concurrency,
            lendable=self.lender.most,
            bounded=settings.wake_lead_bounded,
        )
        # on a graceful stop, model steps in flight may finish (`workflows.drains`)
        self.drains = Drains()
        self.deps: WorkerDeps | None = None
        self.relay: RelayLoop | None = None
        self.cancels: CancelListener | None = None
        self._stack = AsyncExitStack()

    async def start(self) -> None:
        """Enter the "worker" (or "worker-cell") runtime, then start the saq workers on it; on a
        failure, close what was opened."""
        try:
            runtime = await self._stack.enter_async_context(open_runtime(self.settings, self.role))
            await self._start_cancels()
            self.deps = self.deps_for(runtime)
            await self._start_workers(runtime.require_queues(), self.deps)
            self._start_relay(runtime)
            self._warm_up(runtime)
        except BaseException:
            await self._stack.aclose()
            raise

    def _warm_up(self, runtime: Runtime) -> None:
        """The agents' heavy modules (`Agent.warm`: pydantic-ai, a model SDK), imported in a
        thread once the worker polls: a worker is ready in about a second (bench/cold_start.py),
        and a run that needs them before they are in awaits them off the loop. Then what they
        made is frozen too (`telemetry.heap`): the runtime froze before they came, and every
        full collection walked them, 87 to 256 ms a pause on the noisy-neighbour bench."""
        freeze = self.settings.gc_freeze and runtime.owns_process
        warming = asyncio.create_task(
            _warm_then_freeze(runtime, freeze=freeze), name="outlive-warm-up"
        )
        self._stack.push_async_callback(_cancel_warm_up, warming)

    def deps_for(self, runtime: Runtime) -> WorkerDeps:
        """What the tasks read under the saq context's `outlive` key, from the runtime."""
        queues, http = runtime.require_queues(), runtime.http
        assert http is not None  # noqa: S101 (a worker's runtime has its clients)
        settings, sessions = self.settings, runtime.sessions
        limiter = RateLimiter(queues.redis)  # replays' starts and children's: startRun's bucket
        return WorkerDeps(
            workflows=WorkflowDeps(
                sessions=sessions,
                agents=runtime.agents,
                http=http.agents,
                public_transport=http.public,
                settings=settings,
                outputs=OutputStore.of(queues.redis, settings),
                cancels=self.cancels,
                limits=NamedLimits(queues.redis, sessions, settings),
                starts=limiter,
                liveness=runtime.liveness,
                wake_lead=self.lead,
                slots=self.lender,
                drains=self.drains,
                time=self.time,
            ),
            jobs=JobDeps(
                sessions=sessions,
                http=http.webhooks,
                settings=settings,
                mailer=create_mailer(settings),
                handlers=dict(HANDLERS),
                instances=queues.instances,
                agents=runtime.agents,
                limiter=limiter,
            ),
            cron=CronDeps(sessions=sessions, settings=settings, redis=queues.redis),
        )

    async def _start_workers(self, queues: Queues, deps: WorkerDeps) -> None:
        workers, tasks = self.saq_workers(queues, deps), list[asyncio.Task[None]]()
        self._stack.push_async_callback(_stop_workers, workers, tasks)
        for worker in workers:
            await worker.queue.connect()
            tasks.append(asyncio.create_task(worker.start(), name=f"saq-{worker.queue.name}"))

    def saq_workers(self, queues: Queues, deps: WorkerDeps) -> list[Worker[Any]]:
        """The runs worker and the jobs worker (with cron), not started: `start` runs them as
        tasks; a test that counts one run's cost calls their `process()` itself."""
        timers = cast(
            PartialTimersDict,
            {"sweep": self.settings.run_sweep_s, "schedule": SCHEDULE_S, "abort": ABORT_S},
        )
        runs_worker: Worker[Any] = GracefulWorker(
            queues.runs,
            functions=[instrumented_run_task(run_workflow)],
            after_process=after_parking(queues.instances, deps.workflows.sessions),
            concurrency=self.concurrency,
            lender=self.lender,
            # the jobs worker's pass covers this queue too: this one's has nothing to do, and
            # its timer wakes the loop once a minute, not every second
            timers=cast(PartialTimersDict, {**timers, "schedule": ABORT_S}),
            passes=SchedulePass([]),
            shutdown_grace_period_s=None,  # release at once; the run goes on elsewhere
            cancellation_hard_deadline_s=RELEASE_DEADLINE_S,
            drains=(self.drains, self.settings.shutdown_step_grace_s),  # model steps finish
        )
        jobs_worker: Worker[Any] = GracefulWorker(
            queues.jobs,
            functions=[(CONSUME_TASK, consume)],
            cron_jobs=cron_jobs(load_table(self.settings.cron_table)),
            concurrency=self.jobs_concurrency,
            timers=timers,
            passes=SchedulePass([queues.runs, queues.jobs]),  # one round trip for both
            shutdown_grace_period_s=int(self.settings.shutdown_grace_s),  # short jobs finish
            cancellation_hard_deadline_s=RELEASE_DEADLINE_S,
        )
        for worker in (runs_worker, jobs_worker):
            worker.context["outlive"] = deps
            worker.SIGNALS = []  # the embedding process owns the signals
        return [runs_worker, jobs_worker]

    async def _start_cancels(self) -> None:
        """The LISTEN connection that pushes cancel requests to the attempts (`jobs.cancels`);
        none behind PgBouncer in transaction mode (the heartbeats find them there)."""
        database_url, _ = self.settings.require_services()
        listen_url = None if self.settings.db_pgbouncer else database_url
        self.cancels = CancelListener(listen_url)
        await self.cancels.start()
        self._stack.push_async_callback(self.cancels.stop)

    def _start_relay(self, runtime: Runtime) -> None:
        """The relay (`services.relay`): hands the queue whatever PostgreSQL says is due. It
        stops first, before the saq workers."""
        queues = runtime.require_queues()
        database_url, _ = self.settings.require_services()
        self.relay = build_relay(
            self.settings,
            runtime.sessions,
            queues.redis,
            runs_queue=queues.runs,
            jobs_queue=queues.jobs,
            database_url=database_url,
            admission=runtime.sessions.admission,
            lead=self.lead,
            deaths=None if runtime.liveness is None else runtime.liveness.watch(),
            time=self.time,
        )
        self.relay.start()
        self._stack.push_async_callback(self.relay.stop)

    async def stop(self) -> None:
        """Stop the saq workers (each finishing or releasing what it runs), then the runtime."""
        await self._stack.aclose()


async def _warm_then_freeze(runtime: Runtime, *, freeze: bool) -> None:
    began = time.perf_counter()
    await runtime.agents.warm_up()
    if freeze:
        heap.freeze()  # one full collection, once, then none of it is walked again
    # From here on the worker's loop shares the process with nothing of its start-up (what a
    # latency measurement waits for: bench/fairness.py).
    log.info("worker warm: agents' modules imported in %.2fs", time.perf_counter() - began)


async def _cancel_warm_up(task: asyncio.Task[None]) -> None:
    task.cancel()  # its thread finishes the import it is in; nothing waits for it
    await asyncio.gather(task, return_exceptions=True)


async def _stop_workers(workers: list[Worker[Any]], tasks: list[asyncio.Task[None]]) -> None:
    """Together: the jobs worker's grace must not hold up the release of the runs."""
    await asyncio.gather(*(w.stop() for w in workers), return_exceptions=True)
    for task in tasks:
        task.cancel()
        with suppress(asyncio.CancelledError, Exception):
            await task


async def run_until_stopped(host: WorkerHost | list[WorkerHost], stop: asyncio.Event) -> None:
    """Run the host (or one host per cell served, `outlive.cells`) until `stop` is set."""
    hosts = host if isinstance(host, list) else [host]
    started: list[WorkerHost] = []
    try:
        for each in hosts:
            await each.start()
            started.append(each)
            cell = each.settings.cell or "the only cell"
            log.info("worker started on %s (concurrency %s)", cell, each.concurrency)
        await stop.wait()
    finally:
        log.info("worker stopping")
        await asyncio.gather(*(each.stop() for each in started))


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
        back within that long (Redis holds no truth). Then the queues' pass (scheduled jobs now
        due: retries, deliveries later), every second: `passes`, the worker's own queue's
        unless given (`outlive.jobs.schedule_pass`: the jobs worker's covers both queues)."""
        now = time.time()
        for cron_job in self.cron_jobs:
            fires, renew = self._cron_next.get(cron_job.function, (0.0, 0.0))
            if now < fires and now < renew:
                continue
            kwargs = dict(cron_job.__dict__)
            function = kwargs.pop("function").__qualname__
            kwargs["key"] = f"cron:{function}" if kwargs.pop("unique") else None
            at = croniter(kwargs.pop("cron"), datetime.now(self.cron_tz)).get_next()
            options = {k: v for k, v in kwargs.items() if v is not None}
            if await self.queue.enqueue(function, scheduled=int(at), **options) is not None:
                self._cron_next[cron_job.function] = (at, now + CRON_RENEW_S)
            elif now < fires:  # a renewal: the job was there
                self._cron_next[cron_job.function] = (fires, now + CRON_RENEW_S)
            elif await self._holds_fire(kwargs["key"], at):  # another worker enqueued it
                self._cron_next[cron_job.function] = (at, now + CRON_RENEW_S)
            # else the fired job still holds its key: again on the next pass
        if job_ids := await self._passes(max(1, math.floor(lock))):
            log.info("Scheduled %s", job_ids)

    async def _holds_fire(self, key: str | None, at: float) -> bool:
        """Whether the job under `key` waits for the fire time `at`: enqueued by another worker
        of the queue (or by this process before it restarted). Without this look each further
        worker retried the enqueue on every pass until the fire time, a Redis round trip a
        second per cron job (bench/cells.py counted 1.3 a second per cell). A job of a past fire
        time, still running, holds the key too: then the next fire is enqueued once it ended."""
        job = None if key is None else await self.queue.job(key)
        return job is not None and job.status == Status.QUEUED and job.scheduled == int(at)

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
            self._dequeuing.discard(task)

    async def _before_process(self, ctx: Any) -> None:
        self._dequeuing.discard(cast("asyncio.Task[Any]", asyncio.current_task()))  # got a job
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
