"""The chaos scenarios of issues 9 and 17, with real processes and real signals.

`outlive api` and `outlive worker` processes against a Redis server of the scenario's own (AOF,
fsync on every write) and a database: a clone of the test session's, or, when the plan SIGKILLs
PostgreSQL, a cluster of the scenario's own (`tests.faults.OwnPostgres`). Tenants start `demo`
runs one after another, each with a webhook endpoint answered by a receiver in this process that
notes every `webhook-id` and run it is told about. Meanwhile the plan's faults happen
(`tests/chaos/schedule.py`): by default (issue 9) a random worker SIGKILLed every few seconds and
replaced, one API process SIGKILLed and restarted, Redis SIGKILLed and restarted with its AOF;
`Plan.faults` adds FLUSHALL, an empty Redis, a frozen Redis, a PostgreSQL SIGKILL, and busy loops
on every core (issue 17).

The clients behave like clients: a request that failed is sent again (after `retryAfter` when
the answer carries one), and every error they get is recorded with the time it was sent. They
read their runs through the API until settled, and never read a webhook delivery: the receiver
is the only witness that a delivery happened, so nothing repairs a lost delivery by looking at it.
Then the database and the receiver are checked against the invariants (`tests/chaos/checks.py`).

`tests/chaos/test_chaos.py` runs it at a size CI can afford; `bench/chaos.py` runs it longer and
prints the figures.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import signal
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.db.engine import create_engine, create_sessions
from outlive.realtime.nudges import channel_prefix
from outlive.services.tenants import create_token
from tests.chaos.checks import check
from tests.chaos.schedule import DEFAULT, Faults, Window
from tests.faults import OwnPostgres, OwnRedis, busy_loops
from tests.realtime.clients import ApiProcess
from tests.support import loopback_server

START = """mutation($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"""
READ = "query($id: ID!) { run(id: $id) { status } }"
LIST = "{ runs(first: 100) { edges { node { id status } } } }"
DELIVERIES = "{ webhookEndpoints { deliveries(first: 100) { id status } } }"
ENDPOINT = "mutation($u: String!) { createWebhookEndpoint(url: $u) { endpoint { id } } }"
PROBE_INPUT = {"turns": 1, "delayMs": 0}
MUTATIONS = ("startRun", "createWebhookEndpoint")


@dataclass(frozen=True)
class Plan:
    tenants: int = 20
    runs_per_tenant: int = 15
    turns: int = 3
    delay_ms: int = 300
    flaky_every: int = 4  # every 4th run has one retryable fault (flakyAttempts 1)
    fault_s: float = 60.0
    kill_every_s: tuple[float, float] = (3.0, 7.0)
    workers: int = 3
    apis: int = 2
    heartbeat_s: float = 3.0
    sweep_s: int = 2
    grace_s: float = 5.0
    settle_timeout_s: float = 180.0
    seed: int = 9
    keep_going: bool = False  # clients start runs until the faults end, not just runs_per_tenant
    faults: tuple[str, ...] = DEFAULT  # see tests/chaos/schedule.py KINDS
    redis_stop_s: float = 20.0
    postgres_down_s: float = 3.0
    # Issue 17's promise: a mutation needs PostgreSQL and nothing else. With it, a startRun is
    # never refused with QUEUE_UNAVAILABLE, and no run settles FAILED for a queue outage.
    postgres_only: bool = False
    # How long after PostgreSQL answers again a mutation may still be refused (503, and
    # nothing else); also the target for the first successful mutation.
    pg_recovery_target_s: float = 5.0
    # Clients read their run until it settles (a read repairs what it finds: reconcile on read).
    # False: a client learns its run settled from the webhook alone and nothing is read through
    # the API, so nothing repairs a lost run or delivery but the service's own machinery.
    read_runs: bool = True
    # Issue 9's clients also read their deliveries until DELIVERED: a read enqueues again a
    # PENDING delivery whose job was lost (a Redis that was down when its run settled). Without
    # the relay nothing else does, so issue 9's run keeps that read; issue 17's never reads one.
    read_deliveries: bool = False


@dataclass(frozen=True)
class ClientError:
    """One failed request: sent at `at` and failed at `answered` (wall clock); `status` None
    when no answer came back (a killed API, a reset); `code` the GraphQL error code, else the
    HTTP status or exception."""

    at: float
    op: str
    mutation: bool
    status: int | None
    code: str
    answered: float


@dataclass
class Report:
    plan: Plan
    runs: int = 0
    worker_kills: int = 0
    api_kills: int = 0
    redis_kills: int = 0
    faults: dict[str, int] = field(default_factory=dict)  # one-off faults by kind, and `cpu`
    stranded: int = 0
    concurrent_attempts: int = 0  # "doubled": an attempt claimed while another was alive
    failed: int = 0  # settled FAILED although no run asks to fail
    refused: int = 0  # startRun answered QUEUE_UNAVAILABLE (Redis was down): the client retried
    lost_attempts: int = 0
    deliveries: int = 0  # webhooks owed: one per settled run (one endpoint per tenant)
    delivered: int = 0  # of those, the ones the receiver got
    unseen_webhook_ids: int = 0
    webhook_repeats: int = 0  # the same webhook-id received again (at least once, de-duplicable)
    reclaim_s: list[float] = field(default_factory=list)  # a worker's death → its run re-claimed
    # Redis back → each lost item moving again, by fault kind (see checks._handover)
    handover_s: dict[str, list[float]] = field(default_factory=dict)
    never_handed_over: dict[str, int] = field(default_factory=dict)
    pg_recovery_s: list[float] = field(default_factory=list)  # PG back → first good mutation
    mutation_errors_pg_down: int = 0  # answered otherwise than SERVICE_UNAVAILABLE: target 0
    windows: list[Window] = field(default_factory=list)
    mutation_s: list[tuple[float, float]] = field(default_factory=list)  # (sent, answered after)
    client_errors: list[ClientError] = field(default_factory=list)
    violations: list[str] = field(default_factory=list)
    api_tracebacks: list[str] = field(default_factory=list)  # what the API logged, if anything
    api_outages: list[str] = field(default_factory=list)  # its 503s' causes (one line per 5 s)
    elapsed_s: float = 0.0

    def percentile(self, q: float, values: list[float] | None = None) -> float | None:
        values = self.reclaim_s if values is None else values
        if not values:
            return None
        ordered = sorted(values)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    def errors_by_code(self) -> dict[str, int]:
        counts: dict[str, int] = defaultdict(int)
        for e in self.client_errors:
            counts[f"{'mutation' if e.mutation else 'query'} {e.code}"] += 1
        return dict(sorted(counts.items()))

    def summary(self) -> dict[str, Any]:
        lists = {"plan", "reclaim_s", "handover_s", "pg_recovery_s", "windows", "client_errors"}
        lists.add("mutation_s")
        figures = {k: v for k, v in vars(self).items() if k not in lists}
        figures["violations"] = self.violations[:20]
        handovers = [s for values in self.handover_s.values() for s in values]
        for name, values in (("reclaim", self.reclaim_s), ("handover", handovers)):
            p50, p99 = self.percentile(0.5, values), self.percentile(0.99, values)
            figures[f"{name}_p50_s"] = None if p50 is None else round(p50, 2)
            figures[f"{name}_p99_s"] = None if p99 is None else round(p99, 2)
        figures["reclaims"] = len(self.reclaim_s)
        figures["pg_recovery_s"] = [round(s, 2) for s in self.pg_recovery_s]
        figures["client_errors"] = self.errors_by_code()
        figures["slowest_mutations"] = self.slowest_mutations()
        return figures

    def slowest_mutations(self, count: int = 3) -> list[str]:
        """The slowest answers to a mutation, each with the fault in force when it was sent (a
        mutation that needs only PostgreSQL does not wait for a frozen Redis)."""
        slowest = sorted(self.mutation_s, key=lambda m: -m[1])[:count]
        return [
            f"{took:.1f} s"
            + "".join(f" during {w.kind}" for w in self.windows if w.start <= sent <= w.end)
            for sent, took in slowest
        ]


class Fleet:
    """The processes: API and worker processes that can be SIGKILLed and replaced."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        self.apis: list[ApiProcess] = []
        self.workers: list[ApiProcess] = []
        self._stacks: dict[int, contextlib.AsyncExitStack] = {}
        self.worker_kills: list[float] = []  # wall-clock times of the SIGKILLs
        self.every_api: list[ApiProcess] = []  # killed ones too: their logs explain a 500
        self._starting: set[asyncio.Task[ApiProcess]] = set()

    async def start(self, kind: str, tries: int = 1) -> ApiProcess:
        """Start one; with `tries`, a process that could not start (PostgreSQL or Redis down
        at that moment) is started again, as a supervisor would."""
        for attempt in range(1, tries + 1):
            stack = contextlib.AsyncExitStack()
            command = ("api", "--port", "0") if kind == "api" else ("worker", "--concurrency", "8")
            try:
                process = await stack.enter_async_context(
                    ApiProcess.running(self.env, command=command)
                )
            except (AssertionError, TimeoutError):
                await stack.aclose()
                if attempt == tries:
                    raise
                continue
            self._stacks[process.pid] = stack
            if kind == "api":
                self.every_api.append(process)
            (self.apis if kind == "api" else self.workers).append(process)
            return process
        raise AssertionError("unreachable")

    async def kill(self, process: ApiProcess) -> None:
        process.process.send_signal(signal.SIGKILL)
        await process.process.wait()
        for group in (self.apis, self.workers):
            if process in group:
                group.remove(process)
        await self._stacks.pop(process.pid).aclose()

    async def kill_a_worker(self, rng: random.Random) -> bool:
        """SIGKILL a random worker; its replacement starts in the background, as a supervisor
        would restart it."""
        while len(self.workers) < 2 and self._starting:  # never the last one: wait for the
            await asyncio.wait(self._starting, return_when=asyncio.FIRST_COMPLETED)  # others
        if len(self.workers) < 2:
            return False
        victim = rng.choice(self.workers)
        self.worker_kills.append(time.time())
        await self.kill(victim)
        replacement = asyncio.create_task(self.start("worker", tries=5))
        self._starting.add(replacement)
        replacement.add_done_callback(self._starting.discard)
        return True

    async def replaced(self) -> None:
        """Until every killed worker's replacement is up (or gave up trying)."""
        await asyncio.gather(*self._starting, return_exceptions=True)

    def api_tracebacks(self, most: int = 3) -> list[str]:
        """The first errors the API processes logged with a traceback (what a 500 was)."""
        found: list[str] = []
        for api in self.every_api:
            lines = api.lines
            for i, line in enumerate(lines):
                if line.startswith("Traceback") and i > 0 and " ERROR " in lines[i - 1]:
                    end = next(
                        (j for j in range(i + 1, len(lines)) if not lines[j].startswith(" ")),
                        len(lines) - 1,
                    )
                    found.append("\n".join(lines[max(0, i - 1) : end + 1]))
        return found[:most]

    def api_outages(self) -> list[str]:
        """The API processes' warnings that PostgreSQL could not be reached (each names the
        driver's error): what a 503 was."""
        return [line for api in self.every_api for line in api.lines if "cannot be reached" in line]

    def api_url(self, rng: random.Random) -> str:
        url: str = rng.choice(self.apis).url
        return url

    async def close(self) -> None:
        for starting in self._starting:  # a replacement still trying to come up: never mind
            starting.cancel()
        await asyncio.gather(*self._starting, return_exceptions=True)
        for stack in list(self._stacks.values()):
            await stack.aclose()


class Moves:
    """Nudges from every tenant, on the scenario's Redis: a client re-reads when something moved
    (or after a second), and survives Redis going away."""

    def __init__(self, redis_url: str) -> None:
        self._redis_url = redis_url
        self._moved: dict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self._task: asyncio.Task[None] | None = None

    async def __aenter__(self) -> Moves:
        self._task = asyncio.create_task(self._listen())
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)

    async def _listen(self) -> None:
        pattern = f"{channel_prefix(self._redis_url)}*"
        while True:
            redis = Redis.from_url(self._redis_url)
            try:
                async with redis.pubsub() as pubsub:
                    await pubsub.psubscribe(pattern)
                    async for message in pubsub.listen():
                        if message["type"] == "pmessage":
                            tenant = json.loads(message["data"])["tenantId"]
                            self._moved[tenant].set()
            except (OSError, ConnectionError, Exception):  # noqa: BLE001 (Redis was killed)
                await asyncio.sleep(0.2)  # a back-off, then subscribe again
            finally:
                await redis.aclose()

    async def wait(self, tenant_id: str, timeout: float = 1.0) -> None:
        event = self._moved[tenant_id]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(event.wait(), timeout)
        event.clear()


@dataclass
class Client:
    """One tenant's client: starts runs one after another and reads them until settled."""

    tenant_id: str
    token: str
    fleet: Fleet
    moves: Moves
    rng: random.Random
    report: Report
    http: httpx.AsyncClient
    webhooks: Webhooks
    started: list[str] = field(default_factory=list)

    async def gql(self, op: str, query: str, variables: dict[str, Any] | None = None) -> Any:
        """The `data` of the response; a request that failed (no answer, a 5xx, an error) is
        recorded and sent again, to any API process, after `retryAfter` or a short back-off."""
        while True:
            data, back_off = await self.send(op, query, variables)
            if data is not None:
                return data
            await asyncio.sleep(back_off)

    async def send(
        self, op: str, query: str, variables: dict[str, Any] | None = None
    ) -> tuple[Any, float]:
        """One request: (its `data`, 0) or, recorded as a `ClientError`, (None, the back-off)."""
        sent = time.time()
        try:
            response = await self.http.post(
                f"{self.fleet.api_url(self.rng)}/graphql",
                json={"query": query, "variables": variables or {}},
                headers={"Authorization": f"Bearer {self.token}"},
            )
        except (httpx.HTTPError, IndexError) as exc:  # no API process (yet), or no answer
            self._failed(sent, op, None, type(exc).__name__)
            return None, 0.2
        if op in MUTATIONS:
            self.report.mutation_s.append((sent, time.time() - sent))
        try:
            body = response.json()
        except ValueError:
            body = {}
        errors = body.get("errors") or []
        if response.status_code == 200 and not errors and body.get("data") is not None:
            return body["data"], 0.0
        extensions = (errors[0].get("extensions") or {}) if errors else {}
        code = extensions.get("code") or f"HTTP {response.status_code}"
        self._failed(sent, op, response.status_code, code)
        if code == "QUEUE_UNAVAILABLE":
            self.report.refused += 1
            return None, 0.5
        retry_after = extensions.get("retryAfter") or response.headers.get("retry-after")
        return None, min(5.0, float(retry_after)) if retry_after else 0.2

    def _failed(self, at: float, op: str, status: int | None, code: str) -> None:
        mutation = op in MUTATIONS
        self.report.client_errors.append(ClientError(at, op, mutation, status, code, time.time()))

    async def start(self, input: dict[str, Any]) -> str:
        data = await self.gql("startRun", START, {"i": {"agent": "demo", "input": input}})
        run_id: str = data["startRun"]["run"]["id"]
        if run_id not in self.started:
            self.started.append(run_id)
        return run_id

    async def drive(self, plan: Plan, faulting: asyncio.Event) -> None:
        i = 0
        while i < plan.runs_per_tenant or (plan.keep_going and faulting.is_set()):
            i += 1
            input: dict[str, Any] = {"turns": plan.turns, "delayMs": plan.delay_ms}
            if i % plan.flaky_every == 0:
                input["flakyAttempts"] = 1
            run_id = await self.start(input)
            if not plan.read_runs:
                await self.webhooks.until_seen({run_id})  # it settled: its webhook arrived
                continue
            while True:
                data = await self.gql("run", READ, {"id": run_id})
                if data["run"]["status"] not in ("QUEUED", "RUNNING"):
                    break
                await self.moves.wait(self.tenant_id)

    async def probe(self) -> float:
        """startRun every quarter second, answers or not, until one succeeds; returns when."""
        while True:
            data, _ = await self.send(
                "startRun", START, {"i": {"agent": "demo", "input": PROBE_INPUT}}
            )
            if data is not None:
                self.started.append(data["startRun"]["run"]["id"])
                return time.time()
            await asyncio.sleep(0.25)  # a probe's period, whatever retryAfter says

    async def all_delivered(self) -> bool:
        data = await self.gql("deliveries", DELIVERIES)
        return all(
            d["status"] == "DELIVERED"
            for endpoint in data["webhookEndpoints"]
            for d in endpoint["deliveries"]
        )

    async def all_settled(self) -> bool:
        data = await self.gql("runs", LIST)
        return all(e["node"]["status"] not in ("QUEUED", "RUNNING") for e in data["runs"]["edges"])


@dataclass
class Webhooks:
    """What the loopback receiver was sent: every arrival, and the runs it heard of."""

    url: str = ""
    arrivals: list[tuple[float, str, str]] = field(default_factory=list)  # (at, webhook-id, run)
    first_seen: dict[str, float] = field(default_factory=dict)  # run id → first arrival
    arrived: asyncio.Event = field(default_factory=asyncio.Event)

    async def until_seen(self, run_ids: set[str]) -> None:
        while not run_ids <= self.first_seen.keys():
            self.arrived.clear()
            await self.arrived.wait()


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[Webhooks]:
    webhooks = Webhooks()

    async def hook(request: Request) -> Response:
        at = time.time()
        run_id = json.loads(await request.body())["data"]["runId"]
        webhooks.arrivals.append((at, request.headers["webhook-id"], run_id))
        webhooks.first_seen.setdefault(run_id, at)
        webhooks.arrived.set()
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with loopback_server(app) as base:
        webhooks.url = f"{base}/hook"
        yield webhooks


def service_env(plan: Plan, database_url: str, redis_url: str) -> dict[str, str]:
    return {
        "DATABASE_URL": database_url,
        "REDIS_URL": redis_url,
        "OUTLIVE_RUN_HEARTBEAT_S": str(plan.heartbeat_s),
        "OUTLIVE_RUN_SWEEP_S": str(plan.sweep_s),
        "OUTLIVE_RECONCILE_GRACE_S": str(plan.grace_s),
        "OUTLIVE_RUN_RETRY_DELAY_S": "0.5",
        "OUTLIVE_JOB_RETRY_BASE_S": "0.5",
        "OUTLIVE_JOB_RETRY_MAX_S": "4",
        "OUTLIVE_SHUTDOWN_GRACE_S": "1",
        "OUTLIVE_WEBHOOK_ALLOW_PRIVATE": "1",
        "OUTLIVE_LOG_FORMAT": "text",  # a traceback on lines of its own (`Fleet.api_tracebacks`)
    }


async def make_tenants(database_url: str, count: int) -> list[tuple[str, str]]:
    engine = create_engine(database_url, pool_size=2, max_overflow=0)
    sessions = create_sessions(engine)
    made = []
    for i in range(count):
        async with sessions.unit() as uow:
            principal, token = await create_token(
                uow, tenant_slug=f"chaos-{i}", email=f"owner@chaos-{i}.test"
            )
        made.append((str(principal.tenant.id), token))
    await engine.dispose()
    return made


async def run_chaos(plan: Plan, database_url: str | None, workdir: Path) -> Report:
    """The whole scenario, then the checks. `database_url`: a migrated, empty database; None
    when the plan SIGKILLs PostgreSQL (the scenario then runs a cluster of its own)."""
    report = Report(plan=plan)
    began = time.monotonic()
    async with contextlib.AsyncExitStack() as stack:
        postgres: OwnPostgres | None = None
        if "postgres" in plan.faults or database_url is None:
            postgres = await stack.enter_async_context(OwnPostgres.running())
            database_url = postgres.url
        redis = OwnRedis(workdir / "redis")
        await redis.start()
        stack.push_async_callback(redis.kill)
        fleet = Fleet(service_env(plan, database_url, redis.url), workdir)
        stack.push_async_callback(fleet.close)
        webhooks = await stack.enter_async_context(receiver())
        moves = await stack.enter_async_context(Moves(redis.url))
        http = await stack.enter_async_context(httpx.AsyncClient(timeout=30))
        await asyncio.gather(
            *(fleet.start("api") for _ in range(plan.apis)),
            *(fleet.start("worker") for _ in range(plan.workers)),
        )
        tenants = await make_tenants(database_url, plan.tenants + 1)
        clients = [
            Client(
                tenant, token, fleet, moves, random.Random(plan.seed + i), report, http, webhooks
            )
            for i, (tenant, token) in enumerate(tenants)
        ]
        *clients, prober = clients  # the prober starts runs only to time PostgreSQL's return
        for client in [*clients, prober]:
            await client.gql("createWebhookEndpoint", ENDPOINT, {"u": webhooks.url})
        if "cpu" in plan.faults:  # from the first fault to the last check
            report.faults["cpu"] = len(stack.enter_context(busy_loops()))
        faults = Faults(
            plan, report, fleet=fleet, redis=redis, postgres=postgres, probe=prober.probe
        )
        await _drive(plan, clients, faults, webhooks, [*clients, prober])
        await faults.close()
        await check(plan, database_url, report, webhooks, fleet.worker_kills)
        report.api_tracebacks = fleet.api_tracebacks()
        report.api_outages = fleet.api_outages()
    report.elapsed_s = round(time.monotonic() - began, 1)
    return report


async def _drive(
    plan: Plan, clients: list[Client], faults: Faults, webhooks: Webhooks, everyone: list[Client]
) -> None:
    """Clients drive runs while the faults happen; then everything settles and every webhook
    arrives, or `settle_timeout_s` passes (what never settled is reported, not waited for)."""
    faulting = asyncio.Event()
    faulting.set()
    driving = asyncio.gather(*(c.drive(plan, faulting) for c in clients))
    try:
        await faults.run()
    except BaseException:
        driving.cancel()
        await asyncio.gather(driving, return_exceptions=True)
        raise
    faulting.clear()
    try:
        async with asyncio.timeout(plan.settle_timeout_s):
            await driving
            for client in everyone if plan.read_runs else []:
                while not await client.all_settled():
                    await client.moves.wait(client.tenant_id)
            for client in everyone if plan.read_deliveries else []:
                while not await client.all_delivered():
                    await client.moves.wait(client.tenant_id)
            await webhooks.until_seen({run for c in everyone for run in c.started})
    except TimeoutError:
        driving.cancel()
        await asyncio.gather(driving, return_exceptions=True)
