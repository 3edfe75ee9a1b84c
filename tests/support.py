"""Helpers shared by the tests: the GraphQL client, tenants, and waiting on nudges (not sleeps)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar
from uuid import UUID

import asyncpg
import httpx
import pytest
from redis.asyncio import Redis

from outlive.app import build_app
from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.jobs.redis import is_cluster_url, node_url
from outlive.realtime.hub import Hub
from outlive.realtime.links import Sharded
from outlive.realtime.nudges import channel_prefix
from outlive.realtime.revocations import control_channel
from outlive.services.runs import EventRecord, RunRecord, list_events, read_run
from outlive.services.tenants import Principal

T = TypeVar("T")

ON_CLUSTER = os.environ.get("OUTLIVE_TEST_REDIS_CLUSTER") == "1" or is_cluster_url(
    os.environ.get("REDIS_URL", "")
)


def single_redis_only(why: str) -> pytest.MarkDecorator:
    """For a test of one Redis's own behaviour: skipped, saying `why` it cannot apply, when the
    suite runs on a Redis Cluster (`OUTLIVE_TEST_REDIS_CLUSTER=1`, or a cluster `REDIS_URL`)."""
    return pytest.mark.skipif(ON_CLUSTER, reason=f"one Redis only: {why}")


RUN_FIELDS = """id agent status attempt input output error createdAt startedAt finishedAt
cancelRequestedAt heartbeatAt leaseExpiresAt lostAttempts"""


@dataclass
class Servers:
    admin_url: str
    database_url: str
    template: str
    redis_url: str
    run_id: str
    admin: asyncpg.Connection
    cloned: list[str] = field(default_factory=list)

    async def clone(self) -> str:
        """A fresh, migrated database of its own (for tests that need real concurrency)."""
        from outlive.urls import PostgresUrl

        name = f"outlive_test_{self.run_id}_{len(self.cloned) + 1}"
        await self.admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{self.template}"')
        self.cloned.append(name)
        return str(PostgresUrl.parse(self.database_url).with_database(name))


@dataclass
class TenantHandle:
    principal: Principal
    token: str

    @property
    def id(self) -> TenantId:
        return self.principal.tenant.id


class GraphQLError(AssertionError):
    def __init__(self, errors: list[dict[str, Any]]) -> None:
        super().__init__(json.dumps(errors))
        self.errors = errors

    @property
    def codes(self) -> list[str]:
        return [e.get("extensions", {}).get("code") for e in self.errors]


class Api:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    @classmethod
    @contextlib.asynccontextmanager
    async def running(cls, settings: Settings) -> AsyncIterator[Api]:
        app = build_app(settings, serve_web=False)
        async with app.router.lifespan_context(app):
            transport = httpx.ASGITransport(app=app)
            async with httpx.AsyncClient(transport=transport, base_url="http://outlive.test") as c:
                yield cls(c)

    async def post(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str | None
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return await self.client.post(
            "/graphql", json={"query": query, "variables": variables or {}}, headers=headers
        )

    async def gql(
        self, query: str, variables: dict[str, Any] | None = None, *, token: str
    ) -> dict[str, Any]:
        """The `data` of a successful operation; raises `GraphQLError` with the errors."""
        response = await self.post(query, variables, token=token)
        body = response.json()
        if body.get("errors"):
            raise GraphQLError(body["errors"])
        assert response.status_code == 200, response.text
        data: dict[str, Any] = body["data"]
        return data

    async def start_run(
        self, token: str, agent: str = "demo", input: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        data = await self.gql(
            f"""mutation($input: StartRunInput!) {{
                  startRun(input: $input) {{ created run {{ {RUN_FIELDS} }} }} }}""",
            {"input": {"agent": agent, "input": input}},
            token=token,
        )
        started: dict[str, Any] = data["startRun"]
        return started

    async def run(self, token: str, run_id: str, events: bool = False) -> dict[str, Any] | None:
        extra = "events(first: 1000) { seq type data at }" if events else ""
        data = await self.gql(
            f"query($id: ID!) {{ run(id: $id) {{ {RUN_FIELDS} {extra} }} }}",
            {"id": run_id},
            token=token,
        )
        run: dict[str, Any] | None = data["run"]
        return run

    async def cancel(self, token: str, run_id: str) -> dict[str, Any]:
        data = await self.gql(
            f"mutation($id: ID!) {{ cancelRun(id: $id) {{ {RUN_FIELDS} }} }}",
            {"id": run_id},
            token=token,
        )
        run: dict[str, Any] = data["cancelRun"]
        return run


class NudgeWatch:
    """Listens to a tenant's nudge channel; `until` re-reads the row after each nudge."""

    def __init__(self, redis_url: str, sessions: Sessions, tenant_id: UUID) -> None:
        self._url = redis_url
        self._redis = Redis.from_url(node_url(redis_url))
        self._pubsub = self._redis.pubsub()
        self._channel = f"{channel_prefix(redis_url)}{tenant_id}"
        self._sessions = sessions
        self._tenant_id = tenant_id
        self._hub: Hub | None = None  # on a cluster: nudges are sharded there, the hub's way
        self._subscriber: Any = None
        self.seen: list[dict[str, Any]] = []

    async def __aenter__(self) -> NudgeWatch:
        if is_cluster_url(self._url):
            node = node_url(self._url)
            self._hub = Hub(
                self._redis,
                prefix=channel_prefix(self._url),
                control_channel=control_channel(self._url),
                on_control=lambda _: None,
                sharded=Sharded(node, Redis.from_url),
            )
            await self._hub.start()
            self._subscriber = self._hub.add(self._tenant_id)
            assert await self._hub.heard(self._tenant_id)
            return self
        await self._pubsub.subscribe(self._channel)
        # Wait for Redis to confirm: a publish before that would be lost to this watcher.
        while True:
            confirmation = await self._pubsub.get_message(timeout=5)
            if confirmation is not None and confirmation["type"] == "subscribe":
                return self

    async def __aexit__(self, *exc: object) -> None:
        if self._hub is not None:
            await self._hub.stop()
        await self._pubsub.aclose()
        await self._redis.aclose()

    async def next_nudge(self, timeout: float) -> dict[str, Any] | None:
        if self._subscriber is not None:
            try:
                async with asyncio.timeout(timeout):
                    raw: str | bytes = (await self._subscriber.next()).nudge.to_wire()
            except TimeoutError:
                return None
        else:
            message = await self._pubsub.get_message(
                ignore_subscribe_messages=True, timeout=timeout
            )
            if message is None:
                return None
            raw = message["data"]
        nudge: dict[str, Any] = json.loads(raw)
        self.seen.append(nudge)
        return nudge

    async def saw(self, type_: str, timeout: float = 10) -> dict[str, Any]:
        """The first nudge of `type_`, read or still to come.

        A nudge is published after its commit, so a check that re-reads the row can see the new
        state before the nudge that announces it has been read, or even sent: wait for it.
        """

        async def seen() -> dict[str, Any] | None:
            return next((n for n in self.seen if n["type"] == type_), None)

        return await self.until_true(seen, timeout, f"a {type_} nudge")

    async def until(
        self, run_id: str | UUID, predicate: Callable[[RunRecord], bool], timeout: float = 30
    ) -> RunRecord:
        """Re-read the run after every nudge until `predicate` holds."""

        async def check() -> RunRecord | None:
            run = await read_run(
                self._sessions, TenantId(self._tenant_id), RunId(UUID(str(run_id)))
            )
            return run if run is not None and predicate(run) else None

        return await self.until_true(check, timeout, f"run {run_id}")

    async def until_events(
        self,
        run_id: str | UUID,
        predicate: Callable[[list[EventRecord]], bool],
        timeout: float = 30,
    ) -> list[EventRecord]:
        """Re-read the run's timeline after every nudge until `predicate` holds."""

        async def check() -> list[EventRecord] | None:
            events = await list_events(self._sessions, RunId(UUID(str(run_id))), first=1000)
            return events if predicate(events) else None

        return await self.until_true(check, timeout, f"the timeline of {run_id}")

    async def until_true(
        self, check: Callable[[], Awaitable[T | None]], timeout: float, what: str
    ) -> T:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            found = await check()
            if found is not None:
                return found
            remaining = deadline - loop.time()
            if remaining <= 0:
                raise AssertionError(f"{what} never got there in {timeout}s")
            await self.next_nudge(timeout=min(remaining, 1.0))


def settled(run: RunRecord) -> bool:
    return not run.is_active


def spawn_outlive(*args: str, env: dict[str, str], log: Any = None) -> subprocess.Popen[bytes]:
    """`outlive …` as a real child process; its output goes to `log` (a file) or is dropped."""
    return subprocess.Popen(
        [sys.executable, "-m", "outlive.cli", *args],
        env={**os.environ, **env},
        stdout=log if log is not None else subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )


def service_env(settings: Settings, **extra: str) -> dict[str, str]:
    assert settings.database_url is not None
    assert settings.redis_url is not None
    return {"DATABASE_URL": settings.database_url, "REDIS_URL": settings.redis_url, **extra}


@dataclass
class WorkerProcesses:
    """Real `outlive worker` processes that a crash test starts and SIGKILLs; each writes its log
    to `logs/worker-<n>.log`. A short lease (heartbeat 2 s, sweep 1 s), so a take-over comes
    within seconds of a kill; `env` adds to it."""

    settings: Settings
    logs: Path
    concurrency: int = 2
    env: dict[str, str] = field(default_factory=dict)
    started: list[subprocess.Popen[bytes]] = field(default_factory=list)

    @classmethod
    @contextlib.contextmanager
    def of(
        cls, settings: Settings, logs: Path, concurrency: int = 2, **env: str
    ) -> Iterator[WorkerProcesses]:
        """The processes, every one of them killed and reaped on the way out."""
        processes = cls(settings, logs, concurrency, env)
        try:
            yield processes
        finally:
            for process in processes.started:
                if process.poll() is None:
                    process.kill()
                process.wait(timeout=10)

    def start(self) -> subprocess.Popen[bytes]:
        short = {"OUTLIVE_RUN_HEARTBEAT_S": "2", "OUTLIVE_RUN_SWEEP_S": "1"}
        env = service_env(self.settings, **{**short, **self.env})  # `env` may set them too
        with (self.logs / f"worker-{len(self.started)}.log").open("wb") as log:
            # the child holds its own copy of the file
            process = spawn_outlive(
                "worker", "--concurrency", str(self.concurrency), env=env, log=log
            )
        self.started.append(process)
        return process

    async def kill(self, process: subprocess.Popen[bytes]) -> None:
        """SIGKILL, and wait until the process is gone."""
        process.send_signal(signal.SIGKILL)
        await asyncio.to_thread(process.wait, 10)


@contextlib.asynccontextmanager
async def loopback_server(app: Any) -> AsyncIterator[str]:
    """Serve an ASGI app on 127.0.0.1:<free port>; yields its base URL."""
    import socket

    import uvicorn

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        await task
        sock.close()
