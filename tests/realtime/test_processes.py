"""Real `outlive api` processes: fan-out across processes, one Redis subscription per process, and
a graceful SIGTERM (sockets closed with 1012, exit status 0)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import httpx
from redis.asyncio import Redis

from outlive.config import Settings
from tests.realtime.clients import ApiProcess, Socket
from tests.support import Api, TenantHandle, service_env

HUB_SUBSCRIBED = r"realtime: subscribed to "


@contextlib.asynccontextmanager
async def graphql(url: str) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield Api(client)


async def test_a_subscriber_on_one_api_process_hears_a_mutation_made_on_another(
    settings: Settings, tenant: TenantHandle
) -> None:
    env = service_env(settings)
    async with ApiProcess.running(env) as first, ApiProcess.running(env) as second:
        await second.saw(HUB_SUBSCRIBED)
        async with (
            Socket.open(second.url, token=tenant.token) as sock,
            graphql(first.url) as api,
        ):
            await sock.subscribe()
            started = await api.start_run(tenant.token, input={"turns": 1})
            nudge = await sock.next_nudge()
            assert nudge == {**nudge, "type": "run.created", "id": started["run"]["id"]}
            await api.cancel(tenant.token, started["run"]["id"])
            assert await sock.nudge_where(type="run.updated", id=started["run"]["id"])


async def test_one_redis_subscription_per_process_whatever_the_sockets(
    settings: Settings, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    assert settings.redis_url is not None
    redis = Redis.from_url(settings.redis_url)
    async with ApiProcess.running(service_env(settings)) as api:
        await api.saw(HUB_SUBSCRIBED)
        async with contextlib.AsyncExitStack() as stack:
            for i in range(12):
                owner = tenant if i % 2 else other_tenant
                sock = await stack.enter_async_context(Socket.open(api.url, token=owner.token))
                await sock.subscribe()
                await sock.subscribe(id="2")
            clients = await redis.client_list()
        ours = [c for c in clients if c["name"].endswith(f"-{api.pid}")]
        subscribed = [c for c in clients if c["name"].endswith(f"-{api.pid}") and c["sub"] != "0"]
    await redis.aclose()
    assert len(ours) == 1
    assert len(subscribed) == 1
    assert ours[0]["name"].startswith("outlive-hub-")
    assert ours[0]["psub"] == "0"  # no pattern: a channel per served tenant
    assert ours[0]["sub"] == "3"  # the two tenants' channels and the control channel


async def test_sigterm_closes_every_socket_with_1012_and_exits_0(
    settings: Settings, tenant: TenantHandle
) -> None:
    async with (
        ApiProcess.running(service_env(settings)) as api,
        Socket.open(api.url, token=tenant.token) as subscribed,
        Socket.open(api.url, token=tenant.token) as acknowledged,
        Socket.open(api.url) as fresh,
    ):
        await subscribed.subscribe()
        status = asyncio.create_task(api.stop())
        closes = await asyncio.gather(subscribed.closed(), acknowledged.closed(), fresh.closed())
        assert [code for code, _ in closes] == [1012, 1012, 1012]
        assert await status == 0, api.log
