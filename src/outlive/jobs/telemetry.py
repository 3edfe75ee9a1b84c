"""Instrumentation at the edges of the queues: the saq run task, the enqueue hook, the webhook
HTTP transport, and the sampler of pools, queues and sockets.

Nothing here changes what the work does: each piece observes a call it wraps (and, when tracing
is on, carries the trace across the queue in the job's saq `meta`).
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import ssl
import time
from collections.abc import Awaitable, Callable, Sequence
from contextlib import suppress
from typing import Any

import httpx
from prometheus_client import REGISTRY, CollectorRegistry, multiprocess, start_http_server
from redis.asyncio import Redis
from redis.exceptions import RedisError
from saq.job import Job
from saq.queue.redis import RedisQueue
from sqlalchemy.ext.asyncio import AsyncEngine

from outlive.db.tx import Sessions
from outlive.realtime.hub import Hub
from outlive.services.waits.queries import WAITING_RUNS
from outlive.telemetry import logs, metrics, tracing
from outlive.telemetry.daemons import Daemon
from outlive.workflows.runs import RetryLater

log = logging.getLogger(__name__)

TRACEPARENT = "traceparent"
FIRST_ATTEMPT = "first_attempt"  # the first attempt's span, which every retry links to

RunTask = Callable[..., Awaitable[None]]


# --- traces across the queue ------------------------------------------------------------------


async def stamp_traceparent(job: Job) -> None:
    """saq `before_enqueue` hook: a producer span for the enqueue, carried in the job's meta."""
    if not tracing.is_enabled() or TRACEPARENT in job.meta:
        return
    with tracing.span(
        f"{job.queue.name if job.queue else 'queue'} enqueue",
        kind=tracing.SpanKind.PRODUCER,
        attributes={"messaging.system": "saq", "messaging.operation.type": "send"},
    ):
        traceparent = tracing.current_traceparent()
    if traceparent is not None:
        job.meta[TRACEPARENT] = traceparent


def attempt_span(job: Job, name: str, parent: str | None, **attributes: Any) -> Any:
    """The consumer span of one delivery of `job`: a child of the enqueue; a retry links to the
    first attempt's span (remembered in the job's meta, which saq keeps across retries)."""
    if not tracing.is_enabled():
        return tracing.span(name)
    first = job.meta.get(FIRST_ATTEMPT) if job.attempts > 1 else None
    return tracing.span(
        name,
        kind=tracing.SpanKind.CONSUMER,
        parent=parent,
        links=[first] if first else (),
        attributes={"messaging.system": "saq", "outlive.attempt": job.attempts, **attributes},
    )


def remember_first_attempt(job: Job) -> None:
    if tracing.is_enabled() and job.attempts <= 1:
        traceparent = tracing.current_traceparent()
        if traceparent is not None:
            job.meta[FIRST_ATTEMPT] = traceparent


# --- the run task -----------------------------------------------------------------------------


def instrumented_run_task(task: RunTask) -> RunTask:
    """`task` (the saq run workflow function) with its log context, attempt histogram, queue
    wait and trace span. The run's agent is known once it is claimed (`logs.bind` in the run
    services), so the histogram reads it from the log context afterwards."""

    async def run_workflow(ctx: dict[str, Any], *, run_id: str) -> None:
        job: Job = ctx["job"]
        logs.bind(run_id=run_id, job_id=job.key, tenant_id=None, agent=None)
        if job.attempts <= 1 and job.queued:
            metrics.RUN_QUEUE_WAIT.observe(max(0.0, time.time() - job.queued / 1000))
        began = time.perf_counter()
        outcome = "error"
        parent = job.meta.get(TRACEPARENT)
        with attempt_span(job, "run attempt", parent, **{"outlive.run_id": run_id}) as span:
            remember_first_attempt(job)
            try:
                await task(ctx, run_id=run_id)
                outcome = "finished"
            except asyncio.CancelledError:
                outcome = "released"
                raise
            except Exception as exc:
                outcome = "retry" if isinstance(exc, RetryLater) else "error"
                tracing.fail(span, exc)
                raise
            finally:
                agent = logs.current().get("agent", "unknown")
                elapsed = time.perf_counter() - began
                metrics.RUN_ATTEMPT_DURATION.labels(agent, outcome).observe(elapsed)
                log.debug("run attempt %s in %.3fs (attempt %s)", outcome, elapsed, job.attempts)

    run_workflow.__qualname__ = run_workflow.__name__ = getattr(task, "__name__", "run_workflow")
    return run_workflow


# --- webhook requests -------------------------------------------------------------------------


class MeteredTransport(httpx.AsyncBaseTransport):
    """Times outbound requests; those carrying a `webhook-id` header (Standard Webhooks) are
    webhook deliveries and are counted by outcome (status class, or `error`)."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self._inner = inner

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        if "webhook-id" not in request.headers:
            return await self._inner.handle_async_request(request)
        began = time.perf_counter()
        outcome = "error"
        try:
            response = await self._inner.handle_async_request(request)
            outcome = f"{response.status_code // 100}xx"
            return response
        finally:
            metrics.WEBHOOK_REQUESTS.labels(outcome).inc()
            metrics.WEBHOOK_REQUEST_DURATION.labels(outcome).observe(time.perf_counter() - began)

    async def aclose(self) -> None:
        await self._inner.aclose()


def serve_metrics(port: int, host: str) -> Any:
    """prometheus_client's HTTP server (a thread) on `host:port`; `.shutdown()` stops it. It has
    no authentication: on an address other than loopback (`OUTLIVE_METRICS_HOST`'s default is
    0.0.0.0, for Prometheus to scrape workers over the network) a WARNING says so at start, so
    that nobody exposes it past a private network by accident."""
    if not _loopback(host):
        log.warning(
            "/metrics listens on %s:%d without authentication: keep that port on a private"
            " network (or set OUTLIVE_METRICS_HOST=127.0.0.1)",
            host,
            port,
        )
    registry: Any = REGISTRY
    if metrics.is_multiprocess():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # type: ignore[no-untyped-call]
    server, _ = start_http_server(port, host, registry=registry)
    return server


def _loopback(host: str) -> bool:
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return host == "localhost"


def metered_http_client(
    max_connections: int = 100, *, verify: ssl.SSLContext | bool = True
) -> httpx.AsyncClient:
    transport = httpx.AsyncHTTPTransport(
        verify=verify, limits=httpx.Limits(max_connections=max_connections)
    )
    return httpx.AsyncClient(transport=MeteredTransport(transport))


# --- sampling ---------------------------------------------------------------------------------


LAG_PROBE_S = 0.1


async def probe_lag(role: str, every_s: float = LAG_PROBE_S) -> None:
    """For ever: sleep `every_s` and record how late the loop woke this task up
    (`outlive_event_loop_lag_seconds`). A loop held by one coroutine (a big encode, a GC pass,
    a blocking call) delays every other one by as much; the histogram shows it per process."""
    loop = asyncio.get_running_loop()
    lag = metrics.EVENT_LOOP_LAG.labels(role)
    while True:
        began = loop.time()
        await asyncio.sleep(every_s)
        lag.observe(max(0.0, loop.time() - began - every_s))


class Sampler:
    """Every `every_s`, and before each scrape: pool usage, queue depths (saq's own keys, read
    with `redis`), hub subscribers, and (in a worker) the WAITING runs."""

    def __init__(
        self,
        *,
        role: str,
        engine: AsyncEngine | None,
        sessions: Sessions | None,
        redis: Redis | None = None,
        queues: Sequence[RedisQueue] = (),
        hub: Hub | None = None,
        every_s: float = 15.0,
    ) -> None:
        self._role = role
        self._engine = engine
        self._sessions = sessions
        self._redis = redis  # a client of its own: the queues' connections are left alone
        self._queues = list(queues) if redis is not None else []
        self._hub = hub
        self.every_s = every_s
        self.daemon = Daemon("outlive-metrics-sampler", self._loop)  # started by the runtime
        self.lag = Daemon("outlive-loop-lag", lambda: probe_lag(self._role))  # and this one

    async def _loop(self) -> None:
        every_s = self.every_s
        while True:
            try:
                await self.sample()
            except Exception:
                log.debug("metrics sample failed", exc_info=True)
            await asyncio.sleep(every_s)

    async def sample(self) -> None:
        self.sample_pools()
        if self._sessions is not None and self._role == "worker":
            with suppress(Exception):  # PostgreSQL away: the gauge keeps its last value
                row = await self._sessions.one(WAITING_RUNS)
                metrics.RUNS_WAITING.set(row["n"] if row is not None else 0)
        if self._hub is not None:
            metrics.SUBSCRIBERS.set(self._hub.subscriber_count)
        for queue in [p for q in self._queues for p in getattr(q, "partitions", (q,))]:
            assert self._redis is not None  # noqa: S101 (no queues without it)
            with suppress(RedisError, OSError):
                async with self._redis.pipeline(transaction=False) as pipe:
                    pipe.llen(queue.namespace("queued"))
                    pipe.llen(queue.namespace("active"))
                    pipe.zcard(queue.namespace("incomplete"))
                    queued, active, incomplete = await pipe.execute()
                metrics.QUEUE_DEPTH.labels(queue.name, "queued").set(queued)
                metrics.QUEUE_DEPTH.labels(queue.name, "active").set(active)
                metrics.QUEUE_DEPTH.labels(queue.name, "scheduled").set(
                    max(0, incomplete - queued - active)
                )

    def sample_pools(self) -> None:
        if self._engine is not None:
            pool: Any = self._engine.sync_engine.pool
            in_use = pool.checkedout()
            role = self._role
            metrics.DB_POOL_CONNECTIONS.labels(role, "sqlalchemy", "in_use").set(in_use)
            metrics.DB_POOL_CONNECTIONS.labels(role, "sqlalchemy", "idle").set(pool.checkedin())
            metrics.DB_POOL_LIMIT.labels(role, "sqlalchemy").set(pool.size() + pool._max_overflow)
        raw = self._sessions.raw if self._sessions is not None else None
        if raw is not None:
            size, idle = raw.get_size(), raw.get_idle_size()
            metrics.DB_POOL_CONNECTIONS.labels(self._role, "asyncpg", "in_use").set(size - idle)
            metrics.DB_POOL_CONNECTIONS.labels(self._role, "asyncpg", "idle").set(idle)
            metrics.DB_POOL_LIMIT.labels(self._role, "asyncpg").set(raw.get_max_size())
