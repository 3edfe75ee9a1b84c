"""The whole runs/jobs/nudges path on a Redis Cluster of 3 masters and 3 replicas
(`REDIS_URL=redis+cluster://…`): runs, signals, durable sleeps, children, output streams, rate
limits, named limits and webhook deliveries, through the real app and a real worker.

Each test fails without issue 41: on a cluster saq's enqueue script touches keys of several
slots (CROSSSLOT), the named limit's global and tenant buckets are taken in one script (CROSSSLOT:
the limiter lets every call through, logging it), and there was no cluster client at all."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any
from uuid import uuid4

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.agents.demo import stream_text
from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.errors import LimitWait
from outlive.ids import TenantId
from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue, create_redis
from outlive.realtime.outputs import OutputStore, output_key
from outlive.services.limits import NamedLimits
from tests.conftest import make_settings
from tests.redis_cluster import RedisClusterNodes
from tests.support import Api, GraphQLError, NudgeWatch, Servers, TenantHandle, loopback_server
from tests.support import settled as is_settled
from tests.waits.test_signals import signal, waiting
from tests.workflows.test_children import start

pytestmark = pytest.mark.timeout(240)
CREATE_ENDPOINT = """mutation($url: String!) {
  createWebhookEndpoint(url: $url) { endpoint { id } } }"""


@pytest.fixture
async def watch(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> AsyncIterator[NudgeWatch]:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as listening:
        yield listening


async def demo(api: Api, tenant: TenantHandle, **input: Any) -> str:
    """A new `demo` run (a key of its own: a run without one is the agent's one active run)."""
    return await start(api, tenant, "demo", uuid4().hex, **{"turns": 1, "delayMs": 0, **input})


@pytest.mark.usefixtures("worker")
async def test_runs_signals_sleeps_children_streams_and_webhooks_settle_on_a_cluster(
    api: Api, settings: Settings, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    received: list[bytes] = []

    async def hook(request: Request) -> Response:
        received.append(await request.body())
        return Response(status_code=200)

    async with loopback_server(Starlette(routes=[Route("/h", hook, methods=["POST"])])) as base:
        await api.gql(CREATE_ENDPOINT, {"url": f"{base}/h"}, token=tenant.token)
        plain = [await demo(api, tenant, turns=2) for _ in range(6)]
        sleeper = await demo(api, tenant, pauseMs=300)
        waiter = await demo(api, tenant, awaitSignal="go")
        parent = await demo(api, tenant, children=3)
        streamer = await demo(api, tenant, streamChars=40, streamDelayMs=0)
        await watch.until(waiter, waiting, timeout=60)
        assert (await signal(api, tenant.token, waiter, "go"))["accepted"]
        everything = [*plain, sleeper, waiter, parent, streamer]
        for run_id in everything:
            done = await watch.until(run_id, is_settled, timeout=120)
            assert done.status == RunStatus.SUCCEEDED, (run_id, done.error)
        async with asyncio.timeout(60):  # one run.succeeded delivery per run (children too)
            while len(received) < len(everything) + 3:
                await watch.next_nudge(timeout=1.0)
        assert len(received) == len(everything) + 3

    assert settings.redis_url is not None
    redis = create_redis(settings.redis_url)
    try:  # the stream's last chunk says `done`: wait for it on the stream itself
        store, chunks = OutputStore.of(redis, settings), []
        async with asyncio.timeout(30):
            while not chunks or not chunks[-1].done:
                await redis.xread(
                    {output_key(streamer): chunks[-1].cursor if chunks else "0-0"}, block=1000
                )
                chunks = await store.read_after(streamer, None)
        assert "".join(c.text for c in chunks) == stream_text(1, 40), chunks
    finally:
        await redis.aclose()


async def test_each_partition_of_a_queue_is_on_its_own_master_and_holds_its_runs(
    api: Api, settings: Settings, tenant: TenantHandle, cluster: RedisClusterNodes
) -> None:
    assert settings.redis_url is not None
    runs = create_queue(settings.redis_url, RUNS_QUEUE, partitions=3)
    jobs = create_queue(settings.redis_url, JOBS_QUEUE, partitions=3)
    cluster_client: Any = runs.redis
    try:
        await cluster_client.initialize()
        for queue in (runs, jobs):
            masters = {cluster_client.get_node_from_key(p.name).name for p in queue.partitions}
            assert len(masters) == 3, masters  # each master of three gets a partition
        started = [await demo(api, tenant) for _ in range(9)]  # no worker: queued (cap 10)
        for run_id in started:
            part = runs.partition(run_id)
            assert await runs.redis.lpos(part.namespace("queued"), part.job_id(run_id)) is not None
        assert await runs.count("queued") == len(started)
        assert len({runs.partition(r).name for r in started}) > 1
    finally:
        await runs.disconnect()
        await jobs.disconnect()


async def test_rate_limits_and_named_limits_are_enforced_on_a_cluster(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, cluster: RedisClusterNodes
) -> None:
    settings = make_settings(
        servers, redis_url=cluster.url, rate_start_run="2/60", limit_llm="1/3600"
    )
    async with Api.running(settings) as api:
        await demo(api, tenant)
        await demo(api, tenant)
        with pytest.raises(GraphQLError) as limited:
            await demo(api, tenant)
        assert limited.value.codes == ["RATE_LIMITED"]
    redis = create_redis(cluster.url)
    try:
        # learned the cluster first, as a process's runtime does at start: a check has 0.25 s
        # (CHECK_TIMEOUT_S), which the first command's discovery can take on a loaded machine
        await redis.ping()
        limits = NamedLimits(redis, sessions, settings)
        await limits.acquire(TenantId(tenant.id), "llm")
        with pytest.raises(LimitWait):  # enforced: the script ran (no CROSSSLOT let it through)
            await limits.acquire(TenantId(tenant.id), "llm")
    finally:
        await redis.aclose()
