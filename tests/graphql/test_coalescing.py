"""Coalesced reads against a real API, a real PostgreSQL and real concurrency.

The rule under test: identical reads share one execution that started after each of them arrived.
Two tools make the timing deterministic without sleeps: `LOCK TABLE runs` in another connection
holds an execution at its first statement for as long as a test needs, and `Watched.joined(n)`
(a coalescer that counts, installed in the app by the `stack` fixture) returns once n requests
are waiting in it.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import secrets
from collections.abc import AsyncIterator, Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, TypeVar, cast

import asyncpg
import httpx
import pytest

from outlive.app import OutliveApp
from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from outlive.graphql.coalescing import Coalescer, Shared, SharedExecutionCancelled
from outlive.services.tenants import create_token
from tests.conftest import make_settings
from tests.realtime.clients import ApiProcess, serve
from tests.support import Servers, TenantHandle

RUNS = "query Runs($first: Int!) { runs(first: $first) { edges { node { id agent } } } }"
WIDE = """query Wide($first: Int!) { runs(first: $first) { edges { cursor node {
  id agent status attempt input output error createdAt startedAt finishedAt cancelRequestedAt
  events(first: 1) { seq }
} } } }"""
MINE = "{ viewer { user { email } } runs(first: 5) { edges { node { id } } } }"


V = TypeVar("V")


@dataclass
class Watched(Coalescer[V]):
    """A coalescer that counts the requests that joined and the executions that started."""

    requests: int = 0
    executions: int = 0
    _waiting: list[tuple[int, asyncio.Event]] = field(default_factory=list)

    async def run(self, key: Hashable, execute: Callable[[], Awaitable[V]]) -> Shared[V]:
        async def counted() -> V:
            self.executions += 1
            return await execute()

        self.requests += 1  # it joins its batch before the event's waiter wakes
        for count, event in self._waiting:
            if self.requests >= count:
                event.set()
        return await super().run(key, counted)

    async def joined(self, count: int) -> None:
        """Returns once `requests` reached `count`."""
        if self.requests < count:
            event = asyncio.Event()
            self._waiting.append((count, event))
            await event.wait()


@dataclass
class Stack:
    url: str
    coalescer: Watched[Any]
    database_url: str
    sessions: Sessions
    client: httpx.AsyncClient

    async def post(self, query: str, variables: dict[str, Any], token: str) -> httpx.Response:
        return await self.client.post(
            "/graphql",
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {token}"},
        )

    async def data(self, query: str, variables: dict[str, Any], token: str) -> dict[str, Any]:
        response = await self.post(query, variables, token)
        body = response.json()
        assert response.status_code == 200, body
        assert "errors" not in body, body
        data: dict[str, Any] = body["data"]
        return data

    async def user(self, slug: str, email: str) -> TenantHandle:
        async with self.sessions.unit() as uow:
            principal, token = await create_token(uow, tenant_slug=slug, email=email)
        return TenantHandle(principal=principal, token=token)

    @contextlib.asynccontextmanager
    async def runs_locked(self) -> AsyncIterator[None]:
        """Every read of `runs` waits at its first statement until the block ends."""
        conn = await asyncpg.connect(self.database_url)
        try:
            async with conn.transaction():
                await conn.execute("LOCK TABLE runs IN ACCESS EXCLUSIVE MODE")
                yield
        finally:
            await conn.close()

    async def insert_run(self, tenant: TenantHandle, conn: asyncpg.Connection) -> str:
        """A settled run, committed (one autocommit statement) when this returns."""
        run_id = await conn.fetchval(
            "INSERT INTO runs (tenant_id, agent, input, status) "
            "VALUES ($1, 'demo', '{}'::jsonb, 'SUCCEEDED') RETURNING id",
            tenant.id,
        )
        return str(run_id)


@pytest.fixture
async def stack(servers: Servers) -> AsyncIterator[Stack]:
    settings: Settings = make_settings(servers, database_url=await servers.clone())
    assert settings.database_url is not None
    engine = create_engine(settings.database_url)
    limits = httpx.Limits(max_connections=200, max_keepalive_connections=200)
    async with (
        serve(settings) as served,
        httpx.AsyncClient(base_url=served.url, limits=limits, timeout=30) as client,
    ):
        coalescer: Watched[Any] = Watched()
        cast(OutliveApp, served.app).graphql.pipeline.coalescer = coalescer  # counting
        yield Stack(
            served.url,
            coalescer,
            settings.database_url,
            create_sessions(engine),
            client,
        )
    await engine.dispose()


def _slug() -> str:
    return f"c-{secrets.token_hex(4)}"


async def test_a_commit_made_before_a_read_arrives_is_in_its_answer(
    stack: Stack, servers: Servers
) -> None:
    """A real `outlive api` process, readers keeping identical executions in flight all the time
    (a page of runs with their timelines: each execution awaits the database many times after its
    first statement); after each commit, a read of the same document must
    see it: it may never ride on an execution that started before it arrived."""
    tenant = await stack.user(_slug(), "owner@example.test")
    variables = {"first": 12}  # each execution: 12 timelines read at once (connections are shared)
    conn = await asyncpg.connect(stack.database_url)
    for _ in range(12):
        await stack.insert_run(tenant, conn)
    env = {"DATABASE_URL": stack.database_url, "REDIS_URL": servers.redis_url}
    stop = asyncio.Event()
    seen: dict[str, int] = {}
    limits = httpx.Limits(max_connections=20)
    async with (
        ApiProcess.running(env) as api,
        httpx.AsyncClient(base_url=api.url, limits=limits, timeout=30) as client,
    ):

        async def read() -> list[str]:
            response = await client.post(
                "/graphql",
                json={"query": WIDE, "variables": variables},
                headers={"Authorization": f"Bearer {tenant.token}"},
            )
            execution = response.headers["outlive-execution"]
            seen[execution] = seen.get(execution, 0) + 1
            return [edge["node"]["id"] for edge in response.json()["data"]["runs"]["edges"]]

        async def background() -> None:
            while not stop.is_set():
                await read()

        readers = [asyncio.create_task(background()) for _ in range(8)]
        try:
            for _ in range(40):
                run_id = await stack.insert_run(tenant, conn)
                ids = await read()
                assert run_id in ids, f"a read after the commit of {run_id} did not show it"
        finally:
            stop.set()
            await asyncio.gather(*readers)
            await conn.close()
    assert max(seen.values()) > 1  # reads really were shared meanwhile


async def test_a_read_never_joins_an_execution_already_in_flight(stack: Stack) -> None:
    """The rule itself, step by step, with real snapshots: execution 1 has read the database and
    is still running when a commit is made and a second request arrives; that request waits for
    execution 2, which reads after it arrived."""
    tenant = await stack.user(_slug(), "owner@example.test")
    coalescer: Watched[list[str]] = Watched()
    conn = await asyncpg.connect(stack.database_url)
    read_done, release = asyncio.Event(), asyncio.Event()

    async def execute() -> list[str]:
        rows = await conn.fetch("SELECT id FROM runs WHERE tenant_id = $1", tenant.id)
        read_done.set()
        await release.wait()
        return [str(r["id"]) for r in rows]

    try:
        first = asyncio.create_task(coalescer.run("key", execute))
        await asyncio.wait_for(read_done.wait(), 10)  # execution 1 has its snapshot
        writer = await asyncpg.connect(stack.database_url)
        run_id = await stack.insert_run(tenant, writer)
        await writer.close()
        second = asyncio.create_task(coalescer.run("key", execute))
        await asyncio.wait_for(coalescer.joined(2), 10)
        release.set()
        assert run_id not in (await first).value
        assert run_id in (await second).value
        assert coalescer.executions == 2
    finally:
        await conn.close()


async def test_n_concurrent_identical_reads_cost_at_most_two_executions(stack: Stack) -> None:
    tenant = await stack.user(_slug(), "owner@example.test")
    stats = stack.coalescer
    async with stack.runs_locked():
        executions, requests = stats.executions, stats.requests
        reads = [
            asyncio.create_task(stack.data(RUNS, {"first": 5}, tenant.token)) for _ in range(60)
        ]
        await asyncio.wait_for(stack.coalescer.joined(requests + 60), 30)
        assert stats.executions == executions + 1  # the first is held at its statement
    answers = await asyncio.gather(*reads)
    assert stats.executions - executions == 2
    assert all(answer == answers[0] for answer in answers)


async def test_users_never_share_their_own_data_and_tenants_never_share(stack: Stack) -> None:
    slug = _slug()
    ann, bob = (
        await stack.user(slug, "ann@example.test"),
        await stack.user(slug, "bob@example.test"),
    )
    other = await stack.user(_slug(), "cid@example.test")
    conn = await asyncpg.connect(stack.database_url)
    runs = {h.id: await stack.insert_run(h, conn) for h in (ann, other)}
    await conn.close()
    stats = stack.coalescer
    people = [ann, bob, other] * 8

    async def both(handle: TenantHandle) -> tuple[httpx.Response, httpx.Response]:
        return await asyncio.gather(
            stack.post(MINE, {}, handle.token), stack.post(RUNS, {"first": 5}, handle.token)
        )

    async with stack.runs_locked():
        requests = stats.requests
        calls = [asyncio.create_task(both(h)) for h in people]
        await asyncio.wait_for(stack.coalescer.joined(requests + 2 * len(people)), 30)
    answers = await asyncio.gather(*calls)
    executions: dict[tuple[str, str], set[str]] = {}
    for handle, (mine, listed) in zip(people, answers, strict=True):
        email = mine.json()["data"]["viewer"]["user"]["email"]
        assert email == handle.principal.user.email
        for response in (mine, listed):
            ids = [e["node"]["id"] for e in response.json()["data"]["runs"]["edges"]]
            assert ids == [runs[handle.id]]  # the tenant's own run, and only that
        executions.setdefault(("mine", email), set()).add(mine.headers["outlive-execution"])
        executions.setdefault(("runs", email), set()).add(listed.headers["outlive-execution"])
    # The viewer's own data: never one execution for two users.
    assert not executions[("mine", "ann@example.test")] & executions[("mine", "bob@example.test")]
    # The tenant's data only: two users of one tenant share; two tenants never do.
    assert executions[("runs", "ann@example.test")] & executions[("runs", "bob@example.test")]
    assert not executions[("runs", "ann@example.test")] & executions[("runs", "cid@example.test")]


async def test_a_waiting_request_that_goes_away_leaves_the_others_served(stack: Stack) -> None:
    """Its client drops the connection while it waits; the execution it started goes on for the
    requests that joined it, and the next batch is served as usual."""
    tenant = await stack.user(_slug(), "owner@example.test")
    stats = stack.coalescer
    async with stack.runs_locked():
        executions, requests = stats.executions, stats.requests
        first = asyncio.create_task(stack.data(RUNS, {"first": 5}, tenant.token))
        await asyncio.wait_for(stack.coalescer.joined(requests + 1), 30)
        rest = [
            asyncio.create_task(stack.data(RUNS, {"first": 5}, tenant.token)) for _ in range(10)
        ]
        await asyncio.wait_for(stack.coalescer.joined(requests + 11), 30)
        for task in (first, *rest[:3]):
            task.cancel()  # httpx closes those connections
        await asyncio.gather(first, *rest[:3], return_exceptions=True)
    answers = await asyncio.gather(*rest[3:])
    assert all(answer == answers[0] for answer in answers)
    assert stats.executions - executions == 2
    assert await stack.data(RUNS, {"first": 5}, tenant.token) == answers[0]


async def test_an_error_is_every_waiting_request_s_answer_and_the_next_read_works(
    stack: Stack,
) -> None:
    tenant = await stack.user(_slug(), "owner@example.test")
    answers = await asyncio.gather(
        *(stack.post(RUNS, {"first": 1000}, tenant.token) for _ in range(20))
    )
    for response in answers:
        (error,) = response.json()["errors"]
        assert error["extensions"]["code"] == "BAD_USER_INPUT"
    assert (await stack.data(RUNS, {"first": 5}, tenant.token))["runs"]["edges"] == []


async def test_mutations_are_never_coalesced(stack: Stack) -> None:
    tenant = await stack.user(_slug(), "owner@example.test")
    start = 'mutation { startRun(input: {agent: "demo"}) { created run { id } } }'
    requests = stack.coalescer.requests
    answers = await asyncio.gather(*(stack.data(start, {}, tenant.token) for _ in range(12)))
    created = sorted(a["startRun"]["created"] for a in answers)
    assert created == [False] * 11 + [True]  # each executed: one inserted, the others found it
    assert len({a["startRun"]["run"]["id"] for a in answers}) == 1
    assert stack.coalescer.requests == requests


async def test_a_cancelled_request_leaves_its_batch_and_an_exception_reaches_every_request() -> (
    None
):
    """The coalescer alone: the request whose callable a batch runs is cancelled while it waits,
    and the execution still serves the others; an execution that raises gives every request of
    its batch that exception, and the next batch runs as usual."""
    coalescer: Watched[int] = Watched()
    release = asyncio.Event()
    calls = 0

    async def execute() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    async def fail() -> int:
        await release.wait()
        raise LookupError("it fails")

    # Created in one turn of the loop: all four join the batch that runs the owner's callable.
    owner, *others = [asyncio.create_task(coalescer.run("k", execute)) for _ in range(4)]
    await coalescer.joined(4)
    assert coalescer.executions == 1
    owner.cancel()
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await owner
    assert [(await task).value for task in others] == [1, 1, 1]
    assert coalescer._lanes == {}  # nothing left behind

    failing = [asyncio.create_task(coalescer.run("k", fail)) for _ in range(3)]
    for task in failing:
        with pytest.raises(LookupError):
            await task
    assert (await coalescer.run("k", execute)).value == 2
    assert coalescer.executions == 3


async def test_during_a_burst_the_next_batch_waits_for_a_pause_and_serves_more_of_it() -> None:
    """A batch created while an identical execution runs lingers after it (here: until it is 2 s
    old, arrivals never pausing long enough): a request that arrives once the first execution is
    over still joins it. A lone read starts at once."""
    coalescer: Watched[int] = Watched(linger_s=60, max_wait_s=2)
    release = asyncio.Event()
    calls = 0

    async def execute() -> int:
        nonlocal calls
        calls += 1
        await release.wait()
        return calls

    loop = asyncio.get_running_loop()
    began = loop.time()
    first = asyncio.create_task(coalescer.run("k", execute))
    await coalescer.joined(1)
    burst = [asyncio.create_task(coalescer.run("k", execute)) for _ in range(3)]
    await coalescer.joined(4)
    release.set()
    assert (await first).value == 1
    late = asyncio.create_task(coalescer.run("k", execute))  # the first execution is over
    assert [(await t).value for t in (*burst, late)] == [2, 2, 2, 2]
    assert loop.time() - began >= 2
    assert coalescer.executions == 2

    lone = loop.time()
    assert (await coalescer.run("other", execute)).value == 3
    assert loop.time() - lone < 1

    async def forever() -> int:
        await asyncio.Event().wait()
        return 0

    waiting = asyncio.create_task(coalescer.run("k", forever))
    await coalescer.joined(7)
    await coalescer.cancel_all()  # the process stops: the request gets an error, not a hang
    with pytest.raises(SharedExecutionCancelled):
        await waiting


_REQUEST: contextvars.ContextVar[str] = contextvars.ContextVar("test_request", default="none")


async def test_each_batch_executes_in_the_context_of_the_request_that_made_it() -> None:
    """A batch started when the one before it finished runs in its own first request's context
    (its read budget, its tenant's gate), not in the finished execution's: chained executions
    spent the first request's 4 MiB answer budget until readers of a large payload were refused
    (issue 46, bench/payloads.py)."""
    coalescer: Coalescer[str] = Coalescer()
    release = asyncio.Event()

    async def execute() -> str:
        await release.wait()
        return _REQUEST.get()

    async def request(name: str) -> str:
        _REQUEST.set(name)
        return (await coalescer.run("k", execute)).value

    first = asyncio.create_task(request("first"))
    await asyncio.sleep(0)  # its execution is running now; the next request makes a new batch
    second = asyncio.create_task(request("second"))
    await asyncio.sleep(0)
    release.set()
    assert await first == "first"
    assert await second == "second"  # was "first": the chained task copied the old context
