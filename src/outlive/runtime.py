"""One runtime: every resource a process holds, opened in one place and closed in reverse.

`open_runtime(settings, role)` builds what the role needs on one `AsyncExitStack`, registering
each resource's teardown the moment it exists, so a failure half-way closes what was opened and
a normal exit closes everything in the reverse order of its creation. The composition roots (the
API's lifespan, `WorkerHost`, every CLI command that touches PostgreSQL or Redis) enter it;
nothing else builds an engine, a pool, a Redis client or a queue.

Roles:
- `api`: the database (engine and raw pool), Redis, both queues, the publisher (nudges queued
  after each commit, sent by one task: `outlive.realtime.nudges`), the control hub (nudges,
  revocations) with its socket registry and principal cache, the sampler.
- `worker`: the database, Redis, both queues, the publisher, the HTTP clients (agents, webhook
  deliveries), the liveness connection (`outlive.db.liveness`), the sampler and, with
  `OUTLIVE_METRICS_PORT`, the metrics server.
- `cli`: the database only, on a pool of one or two connections.
- `cli-queues`: that, plus Redis, the queues, the publisher and admission (commands that
  enqueue: `tenant set-limits`, `jobs redrive`, `cron run`, `token revoke`).
- `api-cell`: one more cell of an API process (`outlive.cells`): the database and the queues of
  that cell, as the `api` role has them, and nothing else (the hub, the principal cache and the
  sampler are the process's, shared by its cells).
- `worker-cell`: one more cell of a worker process (`OUTLIVE_CELLS`): the `worker` role's
  database, queues, HTTP clients and liveness for that cell, and nothing of the process's own
  (tracing, the event-loop lag probe, the sampler, the metrics server, the heap's freeze): one
  set per process, not one per cell it serves. Each host's timers wake the process (the lag
  probe alone ten times a second), and on a VM a wake-up costs CPU whether or not it finds work
  (docs/cells.md, "CPU per run").

Every connection honours `OUTLIVE_DB_PGBOUNCER` (no named prepared statements; reads in a
transaction), whatever the role.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AsyncExitStack, asynccontextmanager, suppress
from dataclasses import dataclass
from functools import partial
from typing import Literal

import httpx
from redis.asyncio import Redis
from saq.queue.redis import RedisQueue
from sqlalchemy.ext.asyncio import AsyncEngine

from outlive.agents.registry import AgentRegistry
from outlive.config import MissingServiceError, Settings
from outlive.db.engine import create_engine_for, create_sessions, open_raw_pool
from outlive.db.liveness import Liveness
from outlive.db.ports import Limits
from outlive.db.tx import Sessions
from outlive.ids import TokenId
from outlive.jobs.handlers.webhook_deliver_v1 import create_client as webhook_client
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.queues import (
    JOBS_QUEUE,
    RUNS_QUEUE,
    OutliveRedisQueue,
    create_queue,
    create_redis,
)
from outlive.jobs.redis import is_cluster_url, node_url, ready
from outlive.jobs.run_instances import SaqRunInstances
from outlive.jobs.telemetry import (
    MeteredTransport,
    Sampler,
    metered_http_client,
    serve_metrics,
    stamp_traceparent,
)
from outlive.realtime import revocations
from outlive.realtime.hub import Hub, hub_client_name
from outlive.realtime.links import Sharded
from outlive.realtime.nudges import Publisher, channel_prefix
from outlive.realtime.registry import SocketRegistry
from outlive.realtime.revocations import control_channel
from outlive.services import tokens
from outlive.services.admission import TenantAdmission
from outlive.services.tokens import PrincipalCache
from outlive.services.usage_tokens import configure_prices
from outlive.telemetry import genai, heap, metrics, tracing

log = logging.getLogger(__name__)

Role = Literal["api", "worker", "cli", "cli-queues", "api-cell", "worker-cell"]

PROCESS_ROLES = ("api", "worker")  # a process's first runtime: tracing, the sampler, the heap
CLI_POOL_SIZE = 2  # a CLI command's engine: what a cron tick or a redrive uses at most


@dataclass(frozen=True)
class Queues:
    """Redis, the saq queues and what writes to them (every role but `cli`)."""

    redis: Redis
    runs: OutliveRedisQueue
    jobs: OutliveRedisQueue
    publisher: Publisher
    instances: SaqRunInstances


@dataclass(frozen=True)
class Realtime:
    """The API's control subscription (nudges, revocations) and what a revocation reaches."""

    hub: Hub
    auth: PrincipalCache
    sockets: SocketRegistry


@dataclass(frozen=True)
class HttpClients:
    """The worker's outbound HTTP: `agents` (pooled), `webhooks` (no keep-alive, see there),
    `public` (pooled, under each attempt's `ctx.public_http`, which checks destinations)."""

    agents: httpx.AsyncClient
    webhooks: httpx.AsyncClient
    public: httpx.AsyncBaseTransport


@dataclass(frozen=True)
class Runtime:
    settings: Settings
    role: Role
    engine: AsyncEngine
    sessions: Sessions
    agents: AgentRegistry
    queues: Queues | None = None  # every role but `cli`
    realtime: Realtime | None = None  # `api`
    http: HttpClients | None = None  # `worker`, `worker-cell`
    sampler: Sampler | None = None  # `api`, `worker`
    liveness: Liveness | None = None  # `worker(-cell)`, unless no direct connection (PgBouncer)

    @property
    def owns_process(self) -> bool:
        """The process's first runtime (`api`, `worker`), not one more cell's: what is once a
        process (tracing, the sampler, the heap's freeze) is its."""
        return self.role in PROCESS_ROLES

    def require_queues(self) -> Queues:
        if self.queues is None:
            raise RuntimeError(f"the {self.role!r} runtime has no queues")
        return self.queues

    def require_realtime(self) -> Realtime:
        if self.realtime is None:
            raise RuntimeError(f"the {self.role!r} runtime has no realtime hub")
        return self.realtime


@asynccontextmanager
async def open_runtime(settings: Settings, role: Role) -> AsyncIterator[Runtime]:
    """Everything `role` needs, closed in reverse on exit (or on a failure while opening)."""
    owns_process = role in PROCESS_ROLES  # `Runtime.owns_process`
    worker = role in ("worker", "worker-cell")
    database_url, redis_url = _urls(settings, role)
    agents = AgentRegistry([])  # a command that starts no run validates no input
    configure_prices(settings.model_prices)  # what a model costs: usage, budgets
    async with AsyncExitStack() as stack:
        tls = _load_tls(stack) if worker else None
        if owns_process:
            tracing.setup(
                endpoint_set=bool(settings.otel_endpoint),
                disabled=settings.otel_sdk_disabled,
                file=settings.traces_file,
            )
            genai.opt_in(settings.otel_semconv_stability_opt_in)
        if role == "api":
            stack.callback(metrics.process_exited)  # last: after every pool is gone
        queues = None if redis_url is None else await _open_queues(stack, settings, redis_url)
        if role != "cli":
            agents = AgentRegistry.from_entry_points(
                settings.agent_modules, builtin=settings.builtin_agents
            )
        engine, sessions = await _open_db(stack, settings, role, database_url, queues, agents)
        realtime = None
        if role == "api" and redis_url is not None:  # `_urls` required it
            realtime = await _open_realtime(stack, settings, redis_url, sessions)
        runtime = Runtime(
            settings=settings,
            role=role,
            engine=engine,
            sessions=sessions,
            agents=agents,
            queues=queues,
            realtime=realtime,
            http=None if tls is None else await _open_http(stack, await tls),
            liveness=await _open_liveness(stack, settings) if worker else None,
            sampler=await _open_sampler(stack, settings, role, engine, sessions, queues, realtime)
            if owns_process
            else None,
        )
        if role == "worker":
            _serve_metrics(stack, settings)
        if owns_process:
            heap.watch()
            if settings.gc_freeze:  # last: everything startup made (see `telemetry.heap`)
                heap.freeze()
            heap.release()  # held since the command's first import (`outlive.cli.serve`)
        yield runtime


def _urls(settings: Settings, role: Role) -> tuple[str, str | None]:
    if role == "cli":
        if not settings.database_url:
            raise MissingServiceError("DATABASE_URL is not set")
        return settings.database_url, None
    return settings.require_services()


async def _open_queues(stack: AsyncExitStack, settings: Settings, redis_url: str) -> Queues:
    redis = create_redis(redis_url)
    stack.push_async_callback(redis.aclose)
    # each cell's queues (`Settings.of_cell`); the default cell's keep their names
    runs, jobs = (
        create_queue(
            redis_url,
            settings.of_cell(name),
            partitions=settings.queue_partitions,
            consume=settings.queue_consume,
        )
        for name in (RUNS_QUEUE, JOBS_QUEUE)
    )
    for queue in (runs, jobs):
        stack.push_async_callback(_disconnect, queue)
    for client in (redis, runs.redis, jobs.redis):
        await ready(client)
    if tracing.is_enabled():
        runs.register_before_enqueue(stamp_traceparent)
    sharded = await _open_sharded(stack, settings, redis_url, create_redis)
    publisher = Publisher(
        redis, prefix=channel_prefix(redis_url), enabled=settings.realtime, sharded=sharded
    )
    stack.push_async_callback(publisher.drain)  # the deferred nudges, before Redis closes
    return Queues(redis, runs, jobs, publisher, SaqRunInstances(runs, settings))


async def _open_sharded(
    stack: AsyncExitStack, settings: Settings, redis_url: str, connect: Callable[[str], Redis]
) -> Sharded | None:
    """`OUTLIVE_NUDGES_SHARDED` (always on a cluster): nudges on sharded pub/sub, on
    `OUTLIVE_NUDGES_REDIS_URL` (a Redis Cluster node, or any Redis >= 7) or else `REDIS_URL`."""
    if not _sharded_nudges(settings, redis_url):
        return None
    sharded = Sharded(settings.nudges_redis_url or node_url(redis_url), connect)
    stack.push_async_callback(sharded.aclose)
    await sharded.discover()
    return sharded


def _sharded_nudges(settings: Settings, redis_url: str) -> bool:
    return settings.realtime and (settings.nudges_sharded or is_cluster_url(redis_url))


async def _disconnect(queue: RedisQueue) -> None:
    with suppress(Exception):
        await queue.disconnect()


async def _open_db(
    stack: AsyncExitStack,
    settings: Settings,
    role: Role,
    database_url: str,
    queues: Queues | None,
    agents: AgentRegistry,
) -> tuple[AsyncEngine, Sessions]:
    """The engine, the raw pool (servers only; a CLI command goes through SQLAlchemy alone) and
    the sessions, wired to the queues and to admission when there are queues."""
    server = role in ("api", "worker", "api-cell", "worker-cell")
    size = None if server else CLI_POOL_SIZE
    # The API's statements answer tenants: each one is bounded in time (`QueryTimeout` past it).
    timeout = settings.api_statement_timeout_s if role in ("api", "api-cell") else None
    engine = create_engine_for(
        settings, database_url, pool_size=size, max_overflow=size, statement_timeout_s=timeout
    )
    stack.push_async_callback(engine.dispose)
    raw = None
    if server:
        raw = await open_raw_pool(settings, database_url, statement_timeout_s=timeout)
    if raw is not None:
        stack.push_async_callback(raw.close)
    if queues is None:
        return engine, create_sessions(engine, autocommit=not settings.db_pgbouncer)
    limits = Limits.of(settings, len(agents))
    jobs = SaqJobProducer(queues.jobs, settings)
    sessions = create_sessions(
        engine,
        autocommit=not settings.db_pgbouncer,
        raw=raw,
        nudge_sink=queues.publisher.defer,
        jobs=jobs,
        admission=lambda s: TenantAdmission(s, queues.instances, jobs, limits),
    )
    return engine, sessions


async def _open_realtime(
    stack: AsyncExitStack, settings: Settings, redis_url: str, sessions: Sessions
) -> Realtime:
    """The hub's Redis subscriptions: the served tenants' nudges (unless realtime is off) and
    revocations,
    which evict the token from the principal cache and close its sockets. The cache is used
    only while that subscription is live."""
    # classic pub/sub (the control channel) on one node: a cluster carries it to every node
    redis = create_redis(node_url(redis_url), client_name=hub_client_name())
    stack.push_async_callback(redis.aclose)
    sockets = SocketRegistry(
        max_per_tenant=settings.ws_max_per_tenant, recheck_s=settings.ws_recheck_s
    )

    def on_control(raw: bytes | str) -> None:
        announced = revocations.decode(raw)
        if announced is None:
            return
        change, token_id = announced
        auth.revoked(TokenId(token_id))  # evicted: the next request reads it again
        if change == revocations.REVOKED:
            closed = sockets.close_token(token_id)
            log.info("token %s revoked: %d socket(s) closed", token_id, closed)

    def on_resubscribed() -> None:
        auth.clear()
        sockets.recheck_soon()

    name = hub_client_name()
    sharded = None
    if _sharded_nudges(settings, redis_url):
        url = settings.nudges_redis_url or node_url(redis_url)
        sharded = Sharded(url, lambda node_url: create_redis(node_url, client_name=name))
    hub = Hub(
        redis,
        prefix=channel_prefix(redis_url),
        nudges=settings.realtime,
        control_channel=control_channel(redis_url),
        on_control=on_control,
        on_resubscribed=on_resubscribed,
        linger_s=settings.nudges_linger_s,
        sharded=sharded,
    )
    auth = PrincipalCache(settings.auth_cache_s, is_live=hub.is_live)
    await hub.start()  # waits (briefly) for the subscription: no missed first nudges
    sockets.start(partial(tokens.still_valid, sessions))

    async def stop() -> None:
        await hub.stop()  # any socket still open is closed with 1012: clients reconnect
        await sockets.stop()

    stack.push_async_callback(stop)
    return Realtime(hub, auth, sockets)


async def _open_liveness(stack: AsyncExitStack, settings: Settings) -> Liveness | None:
    """The worker's mark of life: a connection of its own, outside every pool, holding its
    liveness lock (`outlive.db.liveness`). It is closed last of the database's resources but
    before a stopping worker's runs would wait on it: `WorkerHost` releases them first."""
    url = settings.liveness_url()
    if url is None:
        log.warning(
            "no liveness connection (behind PgBouncer without OUTLIVE_DB_LIVENESS_URL): a dead"
            " worker's runs are taken over once their lease expires"
        )
        return None
    liveness = Liveness(url)
    await liveness.start()
    stack.push_async_callback(liveness.stop)
    return liveness


def _load_tls(stack: AsyncExitStack) -> asyncio.Future[ssl.SSLContext]:
    """The worker's TLS context (`_open_http`), made in a thread while the runtime connects:
    loading the CA bundle takes 30 to 60 ms, most of it with the GIL released."""
    tls = asyncio.ensure_future(asyncio.to_thread(httpx.create_ssl_context))
    stack.callback(tls.cancel)  # opening failed before it was awaited: nobody will
    return tls


async def _open_http(stack: AsyncExitStack, tls: ssl.SSLContext) -> HttpClients:
    """The worker's three HTTP pools, on one TLS context: httpx makes one per transport unless
    given one, loading the CA bundle each time (`_open_http` took 114 ms, 109 to 129, with a
    context each; 63 ms, 60 to 85, with one made here; 5 rounds each, interleaved)."""
    agents = metered_http_client(max_connections=100, verify=tls)
    stack.push_async_callback(agents.aclose)
    webhooks = webhook_client(wrap=MeteredTransport, verify=tls)  # no keep-alive: see there
    stack.push_async_callback(webhooks.aclose)
    public = MeteredTransport(
        httpx.AsyncHTTPTransport(verify=tls, limits=httpx.Limits(max_connections=100))
    )
    stack.push_async_callback(public.aclose)
    return HttpClients(agents, webhooks, public)


async def _open_sampler(
    stack: AsyncExitStack,
    settings: Settings,
    role: Role,
    engine: AsyncEngine,
    sessions: Sessions,
    queues: Queues | None,
    realtime: Realtime | None,
) -> Sampler:
    sampler = Sampler(
        role=role,
        engine=engine,
        sessions=sessions,
        redis=queues.redis if queues is not None else None,
        queues=(queues.runs, queues.jobs) if queues is not None else (),
        hub=realtime.hub if realtime is not None else None,
        every_s=settings.metrics_sample_s,
    )
    sampler.daemon.start_on(stack)
    sampler.lag.start_on(stack)
    return sampler


def _serve_metrics(stack: AsyncExitStack, settings: Settings) -> None:
    """`OUTLIVE_METRICS_PORT`: Prometheus exposition on a port of its own (a thread)."""
    port = settings.metrics_port
    if port is None:
        return
    server = serve_metrics(port, settings.metrics_host)
    stack.callback(server.server_close)
    stack.callback(server.shutdown)
