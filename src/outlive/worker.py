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
import time
from contextlib import AsyncExitStack, suppress
from dataclasses import dataclass
from typing import Literal, cast

from saq.types import PartialTimersDict

from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.dispatch import cron_jobs
from outlive.cron.loading import load_table
from outlive.db.ports import REAL_TIME, TimeSource
from outlive.jobs.cancels import CancelListener
from outlive.jobs.consumer import consume
from outlive.jobs.deps import JobDeps
from outlive.jobs.graceful import GracefulWorker, quiet
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
# The agents' modules are imported once the worker has held no job for this long (`_warm_up`):
# a worker that has just started is about to be handed what a dead process held (the relay's
# first pass, within about half a second here), and a run needing them imports them itself.
# A worker that is never quiet that long (a steady stream of jobs) warms up after
# `WARM_AT_LATEST_S` anyway: else it would never freeze its start-up heap (`telemetry.heap`).
WARM_WHEN_QUIET_S = 1.0
WARM_AT_LATEST_S = 30.0


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
            workers = await self._start_workers(runtime.require_queues(), self.deps)
            self._start_relay(runtime)
            self._warm_up(runtime, workers)
        except BaseException:
            await self._stack.aclose()
            raise

    def _warm_up(self, runtime: Runtime, workers: list[GracefulWorker]) -> None:
        """The agents' heavy modules (`Agent.warm`: pydantic-ai, a model SDK), imported in a
        thread once the worker polls and has held no job for `WARM_WHEN_QUIET_S` (at the latest
        after `WARM_AT_LATEST_S`, a worker that is never quiet): a worker is ready in about a
        second (bench/cold_start.py), and a run that needs them before they are in awaits them
        off the loop. Not while jobs run: an import holds the GIL for most of its 0.6 to 2.8 s,
        and a worker restarted under 20 runs took them back and finished them about a second
        later for it (bench/peers.py --only restart). Then what they made is frozen too
        (`telemetry.heap`): the runtime froze before they came, and every full collection
        walked them, 87 to 256 ms a pause on the noisy-neighbour bench."""
        freeze = self.settings.gc_freeze and runtime.owns_process
        warming = asyncio.create_task(
            _warm_then_freeze(runtime, workers, freeze=freeze), name="outlive-warm-up"
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

    async def _start_workers(self, queues: Queues, deps: WorkerDeps) -> list[GracefulWorker]:
        workers, tasks = self.saq_workers(queues, deps), list[asyncio.Task[None]]()
        self._stack.push_async_callback(_stop_workers, workers, tasks)
        for worker in workers:
            await worker.queue.connect()
            tasks.append(asyncio.create_task(worker.start(), name=f"saq-{worker.queue.name}"))
        return workers

    def saq_workers(self, queues: Queues, deps: WorkerDeps) -> list[GracefulWorker]:
        """The runs worker and the jobs worker (with cron), not started: `start` runs them as
        tasks; a test that counts one run's cost calls their `process()` itself."""
        timers = cast(
            PartialTimersDict,
            {"sweep": self.settings.run_sweep_s, "schedule": SCHEDULE_S, "abort": ABORT_S},
        )
        runs_worker = GracefulWorker(
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
        jobs_worker = GracefulWorker(
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


async def _warm_then_freeze(
    runtime: Runtime, workers: list[GracefulWorker], *, freeze: bool
) -> None:
    with suppress(TimeoutError):
        async with asyncio.timeout(WARM_AT_LATEST_S):
            await quiet(workers, WARM_WHEN_QUIET_S)
    began = time.perf_counter()
    await runtime.agents.warm_up()
    if freeze:
        heap.freeze()  # the young generations collected, then none of it is walked again
    # From here on the worker's loop shares the process with nothing of its start-up (what a
    # latency measurement waits for: bench/fairness.py).
    log.info("worker warm: agents' modules imported in %.2fs", time.perf_counter() - began)


async def _cancel_warm_up(task: asyncio.Task[None]) -> None:
    task.cancel()  # its thread finishes the import it is in; nothing waits for it
    await asyncio.gather(task, return_exceptions=True)


async def _stop_workers(workers: list[GracefulWorker], tasks: list[asyncio.Task[None]]) -> None:
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
