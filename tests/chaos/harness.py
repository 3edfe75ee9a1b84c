"""The chaos scenario of issue 9, with real processes and real signals.

`outlive api` and `outlive worker` processes against a database and a Redis server of the
scenario's own (AOF, fsync on every write). Tenants start `demo` runs one after another, each
with a webhook endpoint answered by a receiver in this process. Meanwhile a random worker is
SIGKILLed every few seconds and replaced, one API process is SIGKILLed and restarted, and Redis
is SIGKILLed and restarted. The clients behave like clients: they retry a request that failed,
and they read their runs and deliveries through the API until everything settles (reads are what
repairs lost work: there is no sweeper). Then the database is checked against the invariants
(`check`): every run settled, one terminal event and last, gap-free `seq`, as many `claimed` events
as `attempt`, no two attempts of a run alive at once, every delivery DELIVERED and seen.

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
from datetime import datetime
from pathlib import Path
from typing import Any

import asyncpg
import httpx
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.db.engine import create_engine, create_sessions
from outlive.realtime.nudges import channel_prefix
from outlive.services.tenants import create_token
from tests.faults import OwnRedis
from tests.realtime.clients import ApiProcess
from tests.support import loopback_server

TERMINAL = ("succeeded", "failed", "cancelled")
START = """mutation($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"""
READ = "query($id: ID!) { run(id: $id) { status } }"
LIST = "{ runs(first: 100) { edges { node { id status } } } }"
DELIVERIES = "{ webhookEndpoints { deliveries(first: 100) { id status } } }"
ENDPOINT = "mutation($u: String!) { createWebhookEndpoint(url: $u) { endpoint { id } } }"


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


@dataclass
class Report:
    plan: Plan
    runs: int = 0
    worker_kills: int = 0
    api_kills: int = 0
    redis_kills: int = 0
    stranded: int = 0
    concurrent_attempts: int = 0
    failed: int = 0  # settled FAILED although no run asks to fail
    refused: int = 0  # startRun answered QUEUE_UNAVAILABLE (Redis was down): the client retried
    lost_attempts: int = 0
    deliveries: int = 0
    delivered: int = 0
    unseen_webhook_ids: int = 0
    reclaim_s: list[float] = field(default_factory=list)  # a worker's death → its run re-claimed
    violations: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0

    def percentile(self, q: float) -> float | None:
        if not self.reclaim_s:
            return None
        ordered = sorted(self.reclaim_s)
        return ordered[min(len(ordered) - 1, int(len(ordered) * q))]

    def summary(self) -> dict[str, Any]:
        figures = {k: v for k, v in vars(self).items() if k not in ("plan", "reclaim_s")}
        figures["violations"] = self.violations[:20]
        p50, p99 = self.percentile(0.5), self.percentile(0.99)
        figures["reclaim_p50_s"] = None if p50 is None else round(p50, 2)
        figures["reclaim_p99_s"] = None if p99 is None else round(p99, 2)
        figures["reclaims"] = len(self.reclaim_s)
        return figures


class Fleet:
    """The processes: API and worker processes that can be SIGKILLed and replaced."""

    def __init__(self, env: dict[str, str], workdir: Path) -> None:
        self.env = env
        self.workdir = workdir
        self.apis: list[ApiProcess] = []
        self.workers: list[ApiProcess] = []
        self._stacks: dict[int, contextlib.AsyncExitStack] = {}
        self.worker_kills: list[float] = []  # wall-clock times of the SIGKILLs
        self._starting: set[asyncio.Task[ApiProcess]] = set()

    async def start(self, kind: str) -> ApiProcess:
        stack = contextlib.AsyncExitStack()
        command = ("api", "--port", "0") if kind == "api" else ("worker", "--concurrency", "8")
        process = await stack.enter_async_context(ApiProcess.running(self.env, command=command))
        self._stacks[process.pid] = stack
        (self.apis if kind == "api" else self.workers).append(process)
        return process

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
        if len(self.workers) < 2:
            return False  # the others are still starting
        victim = rng.choice(self.workers)
        self.worker_kills.append(time.time())
        await self.kill(victim)
        replacement = asyncio.create_task(self.start("worker"))
        self._starting.add(replacement)
        replacement.add_done_callback(self._starting.discard)
        return True

    def api_url(self, rng: random.Random) -> str:
        return rng.choice(self.apis).url

    async def close(self) -> None:
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

    async def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The response body; a request that did not get through (a killed API, a 5xx) is sent
        again, to any API process, after a short back-off."""
        while True:
            try:
                response = await self.http.post(
                    f"{self.fleet.api_url(self.rng)}/graphql",
                    json={"query": query, "variables": variables or {}},
                    headers={"Authorization": f"Bearer {self.token}"},
                )
                if response.status_code < 500:
                    body: dict[str, Any] = response.json()
                    return body
            except (httpx.HTTPError, IndexError):
                pass
            await asyncio.sleep(0.2)

    async def start(self, input: dict[str, Any]) -> str:
        while True:
            body = await self.gql(START, {"i": {"agent": "demo", "input": input}})
            codes = [e.get("extensions", {}).get("code") for e in body.get("errors") or []]
            if not codes:
                run_id: str = body["data"]["startRun"]["run"]["id"]
                return run_id
            if codes == ["QUEUE_UNAVAILABLE"]:
                self.report.refused += 1
                await asyncio.sleep(0.5)
                continue
            raise AssertionError(f"startRun failed: {body}")

    async def drive(self, plan: Plan, faulting: asyncio.Event) -> None:
        i = 0
        while i < plan.runs_per_tenant or (plan.keep_going and faulting.is_set()):
            i += 1
            input: dict[str, Any] = {"turns": plan.turns, "delayMs": plan.delay_ms}
            if i % plan.flaky_every == 0:
                input["flakyAttempts"] = 1
            run_id = await self.start(input)
            while True:
                body = await self.gql(READ, {"id": run_id})
                if body["data"]["run"]["status"] not in ("QUEUED", "RUNNING"):
                    break
                await self.moves.wait(self.tenant_id)

    async def all_settled(self) -> bool:
        body = await self.gql(LIST)
        return all(
            e["node"]["status"] not in ("QUEUED", "RUNNING") for e in body["data"]["runs"]["edges"]
        )

    async def all_delivered(self) -> bool:
        body = await self.gql(DELIVERIES)
        return all(
            d["status"] == "DELIVERED"
            for endpoint in body["data"]["webhookEndpoints"]
            for d in endpoint["deliveries"]
        )


@contextlib.asynccontextmanager
async def receiver() -> AsyncIterator[tuple[str, set[str]]]:
    seen: set[str] = set()

    async def hook(request: Request) -> Response:
        seen.add(request.headers["webhook-id"])
        return Response(status_code=204)

    app = Starlette(routes=[Route("/hook", hook, methods=["POST"])])
    async with loopback_server(app) as base:
        yield f"{base}/hook", seen


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


async def run_chaos(plan: Plan, database_url: str, workdir: Path) -> Report:
    """The whole scenario, then `check`; the database must be migrated and empty."""
    report = Report(plan=plan)
    rng = random.Random(plan.seed)
    redis = OwnRedis(workdir / "redis")
    await redis.start()
    fleet = Fleet(service_env(plan, database_url, redis.url), workdir)
    began = time.monotonic()
    try:
        async with (
            receiver() as (hook_url, seen),
            Moves(redis.url) as moves,
            httpx.AsyncClient(timeout=30) as http,
        ):
            for kind, count in (("api", plan.apis), ("worker", plan.workers)):
                for _ in range(count):
                    await fleet.start(kind)
            clients = [
                Client(tenant, token, fleet, moves, random.Random(plan.seed + i), report, http)
                for i, (tenant, token) in enumerate(await make_tenants(database_url, plan.tenants))
            ]
            for client in clients:
                body = await client.gql(ENDPOINT, {"u": hook_url})
                assert not body.get("errors"), body
            faulting = asyncio.Event()
            faulting.set()
            driving = asyncio.gather(*(c.drive(plan, faulting) for c in clients))
            await faults(plan, fleet, redis, rng, report)
            faulting.clear()
            try:
                async with asyncio.timeout(plan.settle_timeout_s):
                    await driving
                    await _until_all(clients, "all_settled")
                    await _until_all(clients, "all_delivered")
            except TimeoutError:  # what never settled is reported, not waited for
                driving.cancel()
                await asyncio.gather(driving, return_exceptions=True)
            await check(plan, database_url, report, seen, fleet.worker_kills)
    finally:
        await fleet.close()
        await redis.kill()
    report.elapsed_s = round(time.monotonic() - began, 1)
    return report


async def faults(
    plan: Plan, fleet: Fleet, redis: OwnRedis, rng: random.Random, report: Report
) -> None:
    """For `fault_s`: a worker SIGKILLed (and replaced) every few seconds; once, an API process
    SIGKILLed and restarted; once, Redis SIGKILLed and restarted (it keeps its AOF)."""
    loop = asyncio.get_running_loop()
    began = loop.time()
    api_at, redis_at = began + plan.fault_s * 0.3, began + plan.fault_s * 0.6
    while loop.time() - began < plan.fault_s:
        await asyncio.sleep(rng.uniform(*plan.kill_every_s))  # the fault schedule is a clock
        report.worker_kills += await fleet.kill_a_worker(rng)
        if not report.api_kills and loop.time() >= api_at:
            await fleet.kill(rng.choice(fleet.apis))
            await fleet.start("api")
            report.api_kills += 1
        if not report.redis_kills and loop.time() >= redis_at:
            await redis.restart()
            report.redis_kills += 1


async def _until_all(clients: list[Client], what: str) -> None:
    for client in clients:
        while not await getattr(client, what)():
            await client.moves.wait(client.tenant_id)


# --- the invariants -------------------------------------------------------------------------


async def check(
    plan: Plan, database_url: str, report: Report, seen: set[str], kills: list[float]
) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        runs = await conn.fetch("SELECT * FROM runs")
        events: dict[Any, list[Any]] = defaultdict(list)
        for row in await conn.fetch(
            "SELECT run_id, seq, type, data, at FROM run_events ORDER BY run_id, seq"
        ):
            events[row["run_id"]].append(row)
        deliveries = await conn.fetch("SELECT id, status FROM webhook_deliveries")
    finally:
        await conn.close()
    report.runs = len(runs)
    for run in runs:
        _check_run(plan, run, events[run["id"]], report, kills)
    report.deliveries = len(deliveries)
    report.delivered = sum(d["status"] == "DELIVERED" for d in deliveries)
    report.unseen_webhook_ids = len({f"msg_{d['id'].hex}" for d in deliveries} - seen)
    if len(deliveries) != len(runs):
        report.violations.append(f"{len(runs)} runs settled, {len(deliveries)} deliveries")


def _check_run(
    plan: Plan, run: Any, timeline: list[Any], report: Report, kills: list[float]
) -> None:
    name = str(run["id"])
    types = [e["type"] for e in timeline]
    report.lost_attempts += dict(run).get("lost_attempts", 0)
    if run["status"] in ("QUEUED", "RUNNING"):
        report.stranded += 1
        report.violations.append(f"{name}: stranded {run['status']}: {types}")
        return
    if run["status"] == "FAILED" and "queue unavailable" not in (run["error"] or ""):
        report.failed += 1
        report.violations.append(f"{name}: failed: {run['error']}")
    if [t for t in types if t in TERMINAL] != [types[-1]] or types[-1] not in TERMINAL:
        report.violations.append(f"{name}: terminal events {types}")
    if [e["seq"] for e in timeline] != list(range(1, len(timeline) + 1)):
        report.violations.append(f"{name}: seq not gap-free")
    if types.count("claimed") != run["attempt"]:
        report.violations.append(
            f"{name}: {types.count('claimed')} claims, attempt {run['attempt']}"
        )
    _check_attempts(plan, name, timeline, report, kills)


def _check_attempts(
    plan: Plan, name: str, timeline: list[Any], report: Report, kills: list[float]
) -> None:
    """Attempt k+1 may only be claimed after attempt k ended (`retrying`, `released`) or was
    lost; a lost attempt's last sign of life is more than a lease before the next claim."""
    last_at: datetime | None = None  # the current attempt's latest event
    ended = lost = False
    for event in timeline:
        kind = event["type"]
        if kind == "claimed":
            if last_at is not None:
                gap = (event["at"] - last_at).total_seconds()
                if not (ended or lost) or (lost and gap <= plan.heartbeat_s):
                    report.concurrent_attempts += 1
                    report.violations.append(f"{name}: attempt claimed {gap:.3f}s after the last")
                if lost:
                    _reclaim_latency(event["at"].timestamp(), last_at.timestamp(), report, kills)
            ended = lost = False
        elif kind in ("retrying", "released"):
            ended = True
        elif kind == "lost":
            lost = True
            continue  # the lost attempt's last sign of life stays `last_at`
        last_at = event["at"]


def _reclaim_latency(claimed: float, alive: float, report: Report, kills: list[float]) -> None:
    """From the SIGKILL that took the attempt's worker (the first after its last sign of life)
    to the claim that took the run over."""
    deaths = [k for k in kills if alive <= k <= claimed]
    if deaths:
        report.reclaim_s.append(claimed - deaths[0])
