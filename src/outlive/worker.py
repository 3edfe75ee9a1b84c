"""The worker process: saq workers for run workflows and for the jobs queue (with cron, whose
ticks run on the jobs queue: every worker schedules them, exactly one runs each tick).

A composition root. `WorkerHost` builds the engine, Redis, queues and workflow dependencies from
`Settings`, runs the saq workers as tasks, and stops them gracefully. It never installs signal
handlers of its own (saq would otherwise take SIGINT/SIGTERM from whoever embeds it, such as
uvicorn in `outlive dev`); the process that owns the signals calls `stop()`.

On stop, a run that is executing is released back to QUEUED with its attempt given back (see
`outlive.workflows.runs`); the next worker picks it up at once.
"""

from __future__ import annotations

import asyncio
import logging
from contextlib import suppress
from typing import Any, cast

import httpx
from redis.asyncio import Redis
from saq import Worker
from saq.queue import Queue
from saq.types import PartialTimersDict
from sqlalchemy.ext.asyncio import AsyncEngine

from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.dispatch import cron_jobs
from outlive.cron.loading import load_table
from outlive.db.engine import create_engine_for, open_sessions
from outlive.db.tx import Sessions
from outlive.jobs.consumer import JobDeps, consume
from outlive.jobs.handlers.webhook_deliver_v1 import create_client as webhook_client
from outlive.jobs.mailer import create_mailer
from outlive.jobs.producer import CONSUME_TASK, SaqJobProducer
from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue, create_redis
from outlive.jobs.relay import RelayLoop, build_relay
from outlive.jobs.run_instances import SaqRunInstances, run_workflow
from outlive.jobs.telemetry import (
    MeteredTransport,
    Sampler,
    instrumented_run_task,
    metered_http_client,
    serve_metrics,
    stamp_traceparent,
)
from outlive.realtime.nudges import Publisher, channel_prefix
from outlive.services.admission import Limits, TenantAdmission
from outlive.telemetry import tracing
from outlive.workflows.runs import WorkflowDeps

log = logging.getLogger(__name__)

RELEASE_DEADLINE_S = 10.0  # how long a cancelled attempt may take to release its run


class WorkerHost:
    def __init__(
        self, settings: Settings, *, concurrency: int = 32, jobs_concurrency: int = 16
    ) -> None:
        self.settings = settings
        self.concurrency = concurrency
        self.jobs_concurrency = jobs_concurrency
        self.workers: list[Worker[Any]] = []
        self._tasks: list[asyncio.Task[None]] = []
        self._engine: AsyncEngine | None = None
        self._redis: Redis | None = None
        self._queues: list[Queue] = []
        self._http: httpx.AsyncClient | None = None
        self._webhook_http: httpx.AsyncClient | None = None
        self.deps: WorkflowDeps | None = None
        self._sessions: Sessions | None = None
        self.job_deps: JobDeps | None = None
        self.sampler: Sampler | None = None
        self._metrics_server: Any = None
        self.relay: RelayLoop | None = None

    async def start(self) -> None:
        database_url, redis_url = self.settings.require_services()
        tracing.setup(
            endpoint_set=bool(self.settings.otel_endpoint),
            disabled=self.settings.otel_sdk_disabled,
        )
        self._engine = create_engine_for(self.settings, database_url)
        self._redis = redis = create_redis(redis_url)
        publisher = Publisher(
            self._redis, prefix=channel_prefix(redis_url), enabled=self.settings.realtime
        )
        self._http = metered_http_client(max_connections=100)
        self._webhook_http = webhook_client(wrap=MeteredTransport)  # no keep-alive: see there
        runs_queue = create_queue(redis_url, RUNS_QUEUE)
        jobs_queue = create_queue(redis_url, JOBS_QUEUE)
        if tracing.is_enabled():
            runs_queue.register_before_enqueue(stamp_traceparent)
        self._queues += [runs_queue, jobs_queue]
        sessions = (await open_sessions(self.settings, self._engine, database_url)).wired(
            nudge_sink=publisher.publish, jobs=SaqJobProducer(jobs_queue, self.settings)
        )
        self._sessions = sessions
        self.sampler = Sampler(
            role="worker",
            engine=self._engine,
            sessions=sessions,
            redis=redis,
            queues=(runs_queue, jobs_queue),
        )
        self.sampler.start(self.settings.metrics_sample_s)
        self._serve_metrics()
        agents = AgentRegistry.from_entry_points(self.settings.agent_modules)
        sessions.admission = TenantAdmission(
            sessions,
            SaqRunInstances(runs_queue, self.settings),
            Limits.of(self.settings, len(agents)),
        )
        self.deps = WorkflowDeps(
            sessions=sessions,
            agents=agents,
            http=self._http,
            settings=self.settings,
        )
        self.job_deps = JobDeps(
            sessions=sessions,
            http=self._webhook_http,
            settings=self.settings,
            mailer=create_mailer(self.settings),
            instances=SaqRunInstances(runs_queue, self.settings),
            agents=agents,
        )
        runs_worker: Worker[Any] = GracefulWorker(
            runs_queue,
            functions=[instrumented_run_task(run_workflow)],
            concurrency=self.concurrency,
            timers=cast(
                PartialTimersDict, {"sweep": self.settings.run_sweep_s, "schedule": 1, "abort": 1}
            ),
            shutdown_grace_period_s=None,  # release at once; the run goes on elsewhere
            cancellation_hard_deadline_s=RELEASE_DEADLINE_S,
        )
        runs_worker.context["outlive_workflows"] = self.deps
        jobs_worker: Worker[Any] = GracefulWorker(
            jobs_queue,
            functions=[(CONSUME_TASK, consume)],
            cron_jobs=cron_jobs(load_table(self.settings.cron_table)),
            concurrency=self.jobs_concurrency,
            timers=cast(
                PartialTimersDict, {"sweep": self.settings.run_sweep_s, "schedule": 1, "abort": 1}
            ),
            shutdown_grace_period_s=int(self.settings.shutdown_grace_s),  # short jobs finish
            cancellation_hard_deadline_s=RELEASE_DEADLINE_S,
        )
        jobs_worker.context["outlive_jobs"] = self.job_deps
        jobs_worker.context["outlive_cron"] = CronDeps(
            sessions=sessions, settings=self.settings, redis=redis
        )
        self.workers += [runs_worker, jobs_worker]
        # The relay (`services.relay`): hands the queue whatever PostgreSQL says is due.
        self.relay = build_relay(
            self.settings,
            sessions,
            redis,
            runs_queue=runs_queue,
            jobs_queue=jobs_queue,
            database_url=database_url,
        )
        self.relay.start()
        for worker in self.workers:
            worker.SIGNALS = []  # the embedding process owns the signals
            await worker.queue.connect()
            self._tasks.append(asyncio.create_task(worker.start(), name=f"saq-{worker.queue.name}"))

    def _serve_metrics(self) -> None:
        """`OUTLIVE_METRICS_PORT`: Prometheus exposition on a port of its own (a thread)."""
        port = self.settings.metrics_port
        if port is not None:
            self._metrics_server = serve_metrics(port, self.settings.metrics_host)
            log.info("metrics on http://%s:%s/metrics", self.settings.metrics_host, port)

    async def stop(self) -> None:
        if self.relay is not None:
            await self.relay.stop()
        await asyncio.gather(*(w.stop() for w in self.workers), return_exceptions=True)
        if self.sampler is not None:
            await self.sampler.stop()
        if self._metrics_server is not None:
            self._metrics_server.shutdown()
            self._metrics_server.server_close()
        for task in self._tasks:
            task.cancel()
            with suppress(asyncio.CancelledError, Exception):
                await task
        for queue in self._queues:
            with suppress(Exception):
                await queue.disconnect()
        for client in (self._http, self._webhook_http):
            if client is not None:
                await client.aclose()
        if self._redis is not None:
            await self._redis.aclose()
        if self._sessions is not None:
            await self._sessions.close_raw()
        if self._engine is not None:
            await self._engine.dispose()


async def run_until_stopped(host: WorkerHost, stop: asyncio.Event) -> None:
    await host.start()
    log.info("worker started (concurrency %s)", host.concurrency)
    try:
        await stop.wait()
    finally:
        log.info("worker stopping")
        await host.stop()


class GracefulWorker(Worker[Any]):
    """saq's worker with its shutdown grace spent on jobs only. saq waits the whole grace period
    for every task it owns, idle ones included (a dequeue waiting for work, upkeep loops), so an
    idle worker took `OUTLIVE_SHUTDOWN_GRACE_S` to stop. Here the grace goes to the job functions
    still executing; once they are done, what is left gets a second for its bookkeeping (marking
    the job complete) before the idle waits are cancelled."""

    async def stop(self) -> None:
        self.event.set()  # no new process loops
        grace = self._shutdown_grace_period_s  # saq has no public accessor
        if grace:
            busy = [c["task"] for c in self.job_task_contexts.values() if not c["task"].done()]
            if busy:
                await asyncio.wait(busy, timeout=grace)
            self._shutdown_grace_period_s = 1
        await super().stop()
