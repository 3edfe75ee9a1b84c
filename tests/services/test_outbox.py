"""A process killed between its commit and its enqueue loses nothing: the row is repaired when it
is touched or read. Real processes, a real SIGKILL, and a network path to Redis that hangs so that
the kill lands exactly there."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.worker import WorkerHost
from tests.conftest import make_settings, new_tenant
from tests.faults import StallingProxy, inserts
from tests.realtime.clients import ApiProcess
from tests.support import Api, NudgeWatch, Servers, TenantHandle, loopback_server, service_env


@dataclass
class World:
    settings: Settings  # a database of the test's own; reads repair after 1 s
    sessions: Sessions
    tenant: TenantHandle


@pytest.fixture
async def world(servers: Servers) -> AsyncIterator[World]:
    settings = make_settings(servers, database_url=await servers.clone(), reconcile_grace_s=1)
    assert settings.database_url is not None
    engine = create_engine(settings.database_url)
    sessions = create_sessions(engine)
    yield World(settings, sessions, await new_tenant(sessions))
    await engine.dispose()


@contextlib.asynccontextmanager
async def worker(settings: Settings) -> AsyncIterator[None]:
    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        yield
    finally:
        await host.stop()


async def killed_after_commit(
    world: World,
    table: str,
    command: tuple[str, ...],
    act: Callable[[str], Awaitable[Any]],
    *,
    stall_when: Callable[[], Awaitable[Any]] | None = None,
) -> str:
    """Run `outlive <command>` with its Redis behind a proxy; once it is up (and `stall_when` has
    returned), hang the proxy, `act` (given the process's URL), and SIGKILL the process the moment
    a row of `table` commits. The id of that row."""
    assert world.settings.database_url is not None
    assert world.settings.redis_url is not None
    async with (
        StallingProxy.running(world.settings.redis_url) as proxy,
        inserts(world.settings.database_url, table) as inserted,
    ):
        env = service_env(world.settings, REDIS_URL=proxy.url(world.settings.redis_url))
        async with ApiProcess.running(env, command=command) as process:
            if stall_when is not None:
                await stall_when()
            proxy.stall()
            acting = asyncio.create_task(act(process.url))
            row_id = await asyncio.wait_for(inserted.get(), timeout=60)
            process.process.send_signal(signal.SIGKILL)
            await process.process.wait()
            with contextlib.suppress(httpx.HTTPError):
                await acting
    return row_id


async def post(url: str, token: str, query: str, variables: dict[str, Any]) -> None:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        await client.post(
            "/graphql",
            json={"query": query, "variables": variables},
            headers={"Authorization": f"Bearer {token}"},
        )


async def test_a_run_whose_api_died_before_the_enqueue_runs_when_started_again(
    world: World,
) -> None:
    start = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
    variables = {"i": {"agent": "demo", "input": {"turns": 1, "delayMs": 0}}}
    run_id = await killed_after_commit(
        world,
        "runs",
        ("api", "--port", "0"),
        lambda url: post(url, world.tenant.token, start, variables),
    )
    assert world.settings.redis_url is not None
    queue = create_queue(world.settings.redis_url, RUNS_QUEUE)
    assert await queue.job(run_id) is None  # committed, never enqueued
    await queue.disconnect()

    async with (
        Api.running(world.settings) as api,
        worker(world.settings),
        NudgeWatch(world.settings.redis_url, world.sessions, world.tenant.id) as watch,
    ):
        again = await api.start_run(world.tenant.token, "demo", {"turns": 1, "delayMs": 0})
        assert (again["run"]["id"], again["created"]) == (run_id, False)
        run = await watch.until(run_id, lambda r: r.status == "SUCCEEDED")
    assert run.attempt == 1


async def test_an_invitation_whose_api_died_before_the_enqueue_is_sent_when_listed(
    world: World,
) -> None:
    invite = "mutation($e: String!) { inviteMember(email: $e) { id } }"
    invitation_id = await killed_after_commit(
        world,
        "invitations",
        ("api", "--port", "0"),
        lambda url: post(url, world.tenant.token, invite, {"e": "new@example.com"}),
    )
    assert world.settings.redis_url is not None
    async with (
        Api.running(world.settings) as api,
        worker(world.settings),
        NudgeWatch(world.settings.redis_url, world.sessions, world.tenant.id) as watch,
    ):

        async def sent() -> bool | None:
            listed = await api.gql("{ invitations { id status } }", token=world.tenant.token)
            status = {i["id"]: i["status"] for i in listed["invitations"]}[invitation_id]
            return True if status == "SENT" else None

        assert await watch.until_true(sent, timeout=30, what="the invitation")


async def test_a_delivery_whose_worker_died_before_the_enqueue_is_delivered_when_read(
    world: World,
) -> None:
    received: list[str] = []

    async def receive(request: Request) -> Response:
        received.append(request.headers["webhook-id"])
        return Response(status_code=204)

    receiver = Starlette(routes=[Route("/hook", receive, methods=["POST"])])
    redis_url = world.settings.redis_url
    assert redis_url is not None
    async with loopback_server(receiver) as base, Api.running(world.settings) as api:
        created = await api.gql(
            "mutation($u: String!) { createWebhookEndpoint(url: $u) { endpoint { id } } }",
            {"u": f"{base}/hook"},
            token=world.tenant.token,
        )
        endpoint_id = created["createWebhookEndpoint"]["endpoint"]["id"]
        # One turn of 1.5 s: the worker claims the run through the proxy, which then hangs; it
        # settles the run (its turn's nudge gives up after a while) and hangs on the enqueue.
        started = await api.start_run(world.tenant.token, "demo", {"turns": 1, "delayMs": 1500})
        run_id = started["run"]["id"]

        async def claimed() -> None:
            async with NudgeWatch(redis_url, world.sessions, world.tenant.id) as watch:
                await watch.until(run_id, lambda r: r.status == "RUNNING")

        async def nothing(_: str) -> None:
            """The worker acts on its own."""

        delivery_id = await killed_after_commit(
            world, "webhook_deliveries", ("worker",), nothing, stall_when=claimed
        )

        query = "{ webhookEndpoints { id deliveries { id status } } }"
        async with (
            worker(world.settings),
            NudgeWatch(redis_url, world.sessions, world.tenant.id) as watch,
        ):

            async def delivered() -> bool | None:
                listed = await api.gql(query, token=world.tenant.token)
                (endpoint,) = [e for e in listed["webhookEndpoints"] if e["id"] == endpoint_id]
                statuses = {d["id"]: d["status"] for d in endpoint["deliveries"]}
                return True if statuses[delivery_id] == "DELIVERED" else None

            assert await watch.until_true(delivered, timeout=30, what="the delivery")
    assert received == [f"msg_{delivery_id.replace('-', '')}"]
