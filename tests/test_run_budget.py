"""One run's cost, against the committed budget (`tests/run_budget.json`).

A run's whole life: `startRun` over the real app, its claim by the production saq runs worker,
3 turns of `demo`, its settle, and the one webhook delivery that settle makes, to an endpoint on
loopback, by the production jobs worker. What it costs:

- PostgreSQL statements and transactions, from the server's own statement log
  (`log_statement = all`, csvlog: every statement executed, BEGIN and COMMIT included, with its
  virtual transaction id) on a PostgreSQL of the test's own (`OwnPostgres`, autovacuum off);
- Redis commands (`INFO commandstats`) on a Redis of the test's own (`OwnRedis`); connection
  set-up and health checks (CLIENT, HELLO, SELECT, PING) and the test's own INFO are left out;
- nudges: the messages a pattern subscriber of the deployment's channels receives.

Deterministic: nothing runs in the background. The saq workers are the production ones
(`WorkerHost.saq_workers`) but not started: the test calls `process()` once per job it knows is
queued, so there is no polling, no sweep, no cron tick and no relay (not started either; with the
queue up it would only find nothing to do). One whole life runs first, unmeasured, so that
connections, prepared statements, Lua scripts and the principal cache are warm, as they are in a
process that has served for a while; then the counters are reset and the second life is counted.
Only statements in the app's database between two markers (logged from another database)
count. (`pg_stat_database` was tried first: a backend reports its transactions when it goes idle
or ends, late and in batches, so the warm-up leaked into the count.)

A number above the budget fails; one more than 10% below it fails too, so that the file is
updated in the same commit (`OUTLIVE_BUDGET_WRITE=1 uv run pytest tests/test_run_budget.py`
writes the measured numbers into it).
"""

from __future__ import annotations

import asyncio
import json
import os
import re
from collections import Counter
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from pathlib import Path
from typing import Any

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.app import build_app
from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.realtime.nudges import channel_prefix
from outlive.runtime import open_runtime
from outlive.services.tenants import create_token
from outlive.worker import WorkerHost
from tests.faults import OwnPostgres, OwnRedis
from tests.redis_cluster import MISSING, TOOLS, RedisClusterNodes
from tests.support import Api, loopback_server

BUDGET = Path(__file__).with_name("run_budget.json")
SHRINK = 0.9  # below 90% of the budget: update the file
TURNS = 3
CREATE_ENDPOINT = """mutation($url: String!) {
  createWebhookEndpoint(url: $url) { endpoint { id } } }"""
SETUP_COMMANDS = {"client", "hello", "select", "ping", "info", "config"}
SENTINEL = "outlive-budget-test-end"
CLUSTER_FACTOR = 1.1  # Redis commands per run on a cluster, against one Redis
CLUSTER_SETUP = {"cluster", "readonly", "role", "replconf"}  # the map, our ROLE, replication
WARM_UPS = 6  # lives before the one counted, on a cluster: most partitions have seen a script


class Receiver:
    """The webhook endpoint: records each delivery."""

    def __init__(self) -> None:
        self.received: list[bytes] = []

    async def hook(self, request: Request) -> Response:
        self.received.append(await request.body())
        return Response(status_code=200)


@asynccontextmanager
async def _servers(tmp_path: Path, cluster: bool) -> AsyncIterator[tuple[OwnPostgres, str]]:
    """Its PostgreSQL, and the URL of its Redis: one, or a cluster of 3 masters (and their
    replicas) with `cluster`."""
    settings = {
        "autovacuum": "off",
        "log_statement": "all",
        "log_line_prefix": "@%d|%v|",  # the database and the virtual transaction id
    }
    async with OwnPostgres.running(settings) as postgres:
        if cluster:
            nodes = RedisClusterNodes.start(tmp_path / "cluster")
            try:
                yield postgres, nodes.url
            finally:
                nodes.stop()
            return
        redis = OwnRedis(tmp_path / "redis")
        await redis.start()
        try:
            yield postgres, redis.url
        finally:
            await redis.kill()


async def _commandstats(url: str) -> Counter[str]:
    """The commands the Redis (every master of a cluster: a replica's are copies) executed."""
    counts: Counter[str] = Counter()
    hosts = url.split("://", 1)[1].split("/")[0].split(",")
    urls = [f"redis://{h}/0" for h in hosts] if "+cluster://" in url else [url]
    for node in urls:
        client = Redis.from_url(node)
        try:
            if "+cluster://" in url and (await client.execute_command("ROLE"))[0] != b"master":
                continue
            stats = await client.info("commandstats")
        finally:
            await client.aclose()
        for key, value in stats.items():
            name = key.removeprefix("cmdstat_")
            if name.split("|")[0] not in SETUP_COMMANDS | CLUSTER_SETUP:
                counts[name] += int(value["calls"])
    return counts


class NudgeCount:
    """Every message on the deployment's nudge channels, until the test's own sentinel."""

    def __init__(self, redis_url: str) -> None:
        self._redis = Redis.from_url(redis_url)
        self._pubsub = self._redis.pubsub()
        self._prefix = channel_prefix(redis_url)
        self.types: Counter[str] = Counter()

    async def __aenter__(self) -> NudgeCount:
        await self._pubsub.psubscribe(f"{self._prefix}*")
        await self._pubsub.subscribe(SENTINEL)  # outside the nudge channels: no API hears it
        confirmed = set()
        async with asyncio.timeout(10):  # Redis confirms: nothing published after is missed
            while confirmed != {"psubscribe", "subscribe"}:
                confirmation = await self._pubsub.get_message(timeout=5)
                if confirmation is not None:
                    confirmed.add(confirmation["type"])
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._pubsub.aclose()
        await self._redis.aclose()

    async def until_sentinel(self) -> Counter[str]:
        """The nudges counted, once the sentinel (published after every drain) is back."""
        await self._redis.publish(SENTINEL, SENTINEL)  # after every nudge on this connection
        async with asyncio.timeout(10):
            while True:
                message = await self._pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
                if message is None:
                    continue
                if message["data"] == SENTINEL.encode():
                    return self.types
                self.types[json.loads(message["data"])["type"]] += 1


async def _life(api: Api, workers: list[Any], token: str, receiver: Receiver) -> None:
    """One run, from `startRun` to its webhook delivered."""
    runs_worker, jobs_worker = workers
    delivered = len(receiver.received)
    started = await api.start_run(token, "demo", {"turns": TURNS, "delayMs": 0})
    assert started["created"]
    async with asyncio.timeout(30):
        assert await runs_worker.process()  # claim, 3 turns, settle (the delivery job enqueued)
        assert await jobs_worker.process()  # the webhook delivery
    assert len(receiver.received) == delivered + 1
    webhook = json.loads(receiver.received[-1])
    assert webhook["type"] == "run.succeeded"
    assert webhook["data"]["runId"] == started["run"]["id"]


class StatementLog:
    """PostgreSQL's own statement log (`log_statement = all`, kept by `OwnPostgres.output`),
    between two markers the test logs from another database: each statement executed in the
    app's database, and its virtual transaction id (an autocommit statement has its own; BEGIN …
    COMMIT share one)."""

    RECORD = re.compile(r"^@(\w*)\|([^|]*)\|LOG:  (?:statement|execute [^:]*): (.*)$")

    def __init__(self, server: OwnPostgres) -> None:
        self.server = server
        self.url = server.url.rsplit("/", 1)[0] + "/postgres"

    async def mark(self, name: str) -> None:
        conn = await asyncpg.connect(self.url)
        try:
            await conn.execute(f"SELECT '{name}'")
        finally:
            await conn.close()

    async def between(self, begin: str, end: str) -> list[tuple[str, str]]:
        """(virtual transaction id, statement) of the app's database between the markers."""
        async with asyncio.timeout(30):
            await self.server.until_logged(f"SELECT '{end}'".encode())
        records: list[tuple[str, str, str]] = []
        for line in self.server.output.decode(errors="replace").splitlines():
            if line.startswith("\t") and records:  # a statement's next line
                database, vxid, text = records[-1]
                records[-1] = (database, vxid, f"{text} {line.strip()}")
            elif found := self.RECORD.match(line):
                records.append((found[1], found[2], found[3]))
            elif line.startswith("@"):
                records.append(("", "", ""))  # another message: ends the statement before
        rows, inside = [], False
        for database, vxid, text in records:
            if text == f"SELECT '{begin}'":
                inside = True
            elif text == f"SELECT '{end}'":
                break
            elif inside and database == "outlive":
                rows.append((vxid, " ".join(text.split())))
        return rows


async def _measure(tmp_path: Path, *, cluster: bool = False) -> dict[str, Any]:
    receiver = Receiver()
    hook = Starlette(routes=[Route("/hook", receiver.hook, methods=["POST"])])
    async with _servers(tmp_path, cluster) as (postgres, redis_url), loopback_server(hook) as base:
        settings = Settings(  # no metrics sample in the window: it is not the run's
            database_url=postgres.url,
            redis_url=redis_url,
            webhook_allow_private=True,
            metrics_sample_s=3600,
        )
        engine = create_engine(postgres.url)
        async with create_sessions(engine).unit() as uow:
            _, token = await create_token(uow, tenant_slug="budget", email="owner@budget.test")
        await engine.dispose()
        log = StatementLog(postgres)

        async with AsyncExitStack() as stack:
            runtime = await stack.enter_async_context(open_runtime(settings, "worker"))
            app = build_app(settings, serve_web=False)
            await stack.enter_async_context(app.router.lifespan_context(app))
            transport = httpx.ASGITransport(app=app)
            client = httpx.AsyncClient(transport=transport, base_url="http://outlive.test")
            api = Api(await stack.enter_async_context(client))
            publishers = [
                app.state.runtime.require_queues().publisher,  # the API's deferred nudges
                runtime.require_queues().publisher,
            ]
            host = WorkerHost(settings, concurrency=1, jobs_concurrency=1)
            workers = host.saq_workers(runtime.require_queues(), host.deps_for(runtime))
            for worker in workers:
                await worker.queue.connect()
            await api.gql(CREATE_ENDPOINT, {"url": f"{base}/hook"}, token=token)
            for _ in range(WARM_UPS if cluster else 1):  # warm-up, not counted (a cluster's
                await _life(api, workers, token, receiver)  # scripts: on each master it uses)
            for publisher in publishers:
                await publisher.drain()
            # a cluster's nudges are sharded: counted as the SPUBLISH commands that carry them
            nudges = None if cluster else await stack.enter_async_context(NudgeCount(redis_url))
            redis_before = await _commandstats(redis_url)
            await log.mark("budget-begin")

            await _life(api, workers, token, receiver)

            for publisher in publishers:
                await publisher.drain()
            await log.mark("budget-end")
            redis_after = await _commandstats(redis_url)
            nudge_types = Counter() if nudges is None else Counter(await nudges.until_sentinel())
        statements = await log.between("budget-begin", "budget-end")
    commands = redis_after - redis_before
    return {
        "postgres": {
            "statements": len(statements),
            "transactions": len({vxid for vxid, _ in statements}),
        },
        "redis": {"commands": sum(commands.values())},
        "nudges": sum(nudge_types.values()),
        "detail": {
            "statements": [statement[:140] for _, statement in statements],
            "redis_commands": dict(sorted(commands.items())),
            "nudges": dict(sorted(nudge_types.items())),
        },
    }


def _compare(measured: dict[str, Any], budget: dict[str, Any]) -> list[str]:
    problems = []
    for path in (
        ("postgres", "statements"),
        ("postgres", "transactions"),
        ("redis", "commands"),
        ("nudges",),
    ):
        got, allowed = measured, budget
        for key in path:
            got, allowed = got[key], allowed[key]
        name = ".".join(path)
        if got > allowed:
            problems.append(f"{name}: {got}, over the budget of {allowed}")
        elif got < allowed * SHRINK:
            problems.append(f"{name}: {got}, well under the budget of {allowed}: update it")
    return problems


async def test_one_run_costs_what_the_budget_says(tmp_path: Path) -> None:
    measured = await _measure(tmp_path)
    if os.environ.get("OUTLIVE_BUDGET_WRITE") == "1":
        BUDGET.write_text(json.dumps(measured, indent=2, sort_keys=True) + "\n")
    budget = json.loads(BUDGET.read_text())
    problems = _compare(measured, budget)
    assert not problems, "\n".join(
        [*problems, "measured:", json.dumps(measured["detail"], indent=2)]
    )
    assert measured["nudges"] > 0  # the counting sees the run's nudges at all
    assert measured["redis"]["commands"] > 0
    assert measured["postgres"]["statements"] >= measured["postgres"]["transactions"] > 0


@pytest.mark.skipif(TOOLS is None, reason=MISSING)
async def test_one_run_costs_the_same_on_a_redis_cluster(tmp_path: Path) -> None:
    """The same life on a cluster of 3 masters (3 run partitions, 3 jobs partitions): the same
    statements, and Redis commands within 1.1x of one Redis's budget."""
    measured = await _measure(tmp_path, cluster=True)
    budget = json.loads(BUDGET.read_text())
    detail = json.dumps(measured["detail"], indent=2)
    assert measured["postgres"]["statements"] == budget["postgres"]["statements"], detail
    assert measured["detail"]["statements"] == budget["detail"]["statements"], detail
    assert 0 < measured["redis"]["commands"] <= CLUSTER_FACTOR * budget["redis"]["commands"], detail
    assert measured["detail"]["redis_commands"].get("spublish", 0) == budget["nudges"], detail
    print(f"\nredis commands per run: {measured['redis']['commands']} on a cluster")  # noqa: T201


def test_the_comparison_fails_on_growth_and_on_a_large_shrink() -> None:
    budget = {"postgres": {"statements": 10, "transactions": 5}, "redis": {"commands": 20}}
    budget["nudges"] = 4
    same = json.loads(json.dumps(budget))
    assert _compare(same, budget) == []
    grown = json.loads(json.dumps(budget))
    grown["redis"]["commands"] = 21
    assert _compare(grown, budget) == ["redis.commands: 21, over the budget of 20"]
    shrunk = json.loads(json.dumps(budget))
    shrunk["postgres"]["statements"] = 8
    assert _compare(shrunk, budget) == [
        "postgres.statements: 8, well under the budget of 10: update it"
    ]
