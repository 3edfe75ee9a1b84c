"""A process hears only the tenants it serves: the hub subscribes to a tenant's channel with its
first local subscriber and leaves it `linger_s` after the last one, on plain or sharded pub/sub.

Against the shared Redis (pub/sub ignores db numbers; the channel prefix of the test's db index
keeps the tests apart). Redis itself is the witness: `PUBSUB NUMSUB`, and what `PUBLISH` says it
reached. On a Redis Cluster the hub's plain pub/sub is on the first node the URL names, as the
runtime's is (`node_url`): the counts are that node's."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime

import pytest
from redis.asyncio import Redis

from outlive.config import Settings
from outlive.jobs.redis import create_redis, node_url
from outlive.realtime.hub import Hub, Subscriber
from outlive.realtime.links import Sharded
from outlive.realtime.nudges import Nudge, Publisher, channel_prefix
from outlive.realtime.revocations import control_channel, decode_revoked, encode_revoked
from tests.support import single_redis_only


def nudge(tenant_id: uuid.UUID) -> Nudge:
    return Nudge("run.updated", tenant_id, datetime.now(UTC), uuid.uuid4())


async def next_of(subscriber: Subscriber) -> Nudge:
    async with asyncio.timeout(10):
        return (await subscriber.next()).nudge


@asynccontextmanager
async def running(
    settings: Settings, health_check_s: float = 30, **options: object
) -> AsyncIterator[tuple[Hub, Redis]]:
    assert settings.redis_url is not None
    redis = create_redis(node_url(settings.redis_url), health_check_interval=health_check_s)
    hub = Hub(redis, prefix=channel_prefix(settings.redis_url), **options)  # type: ignore[arg-type]
    await hub.start()
    try:
        yield hub, redis
    finally:
        await hub.stop()
        await redis.aclose()


async def numsub(redis: Redis, channel: str, *, sharded: bool = False) -> int:
    command = "PUBSUB SHARDNUMSUB" if sharded else "PUBSUB NUMSUB"
    reply = await redis.execute_command(command, channel)
    if reply and isinstance(reply[0], tuple | list):  # redis-py pairs NUMSUB's answer up
        return int(reply[0][1])
    return int(reply[1])


async def until_numsub(redis: Redis, channel: str, count: int, *, sharded: bool = False) -> None:
    """Redis's own count: the UNSUBSCRIBE is the hub's background work, with nothing to await."""
    async with asyncio.timeout(10):
        while await numsub(redis, channel, sharded=sharded) != count:  # noqa: ASYNC110 (Redis's)
            await asyncio.sleep(0.01)


async def test_a_process_subscribes_only_to_its_tenants_channels(settings: Settings) -> None:
    served, other = uuid.uuid4(), uuid.uuid4()
    async with running(settings) as (hub, redis):
        assert hub.tenants == frozenset()
        subscriber = hub.add(served)
        assert await hub.heard(served)
        assert await numsub(redis, hub.channel(served)) == 1
        assert await numsub(redis, hub.channel(other)) == 0
        assert await redis.publish(hub.channel(other), nudge(other).to_wire()) == 0  # nobody
        sent = nudge(served)
        assert await redis.publish(hub.channel(served), sent.to_wire()) == 1
        assert await next_of(subscriber) == sent
        assert hub.received == 1
        assert hub.tenants == {served}


async def test_the_channel_lingers_after_the_last_subscriber_then_goes(settings: Settings) -> None:
    tenant = uuid.uuid4()
    async with running(settings, linger_s=30.0) as (hub, redis):
        first = hub.add(tenant)
        assert await hub.heard(tenant)
        commands = hub.main.subscribe_commands
        hub.remove(first)
        assert hub.tenants == {tenant}  # lingering: a reload costs no UNSUBSCRIBE + SUBSCRIBE
        again = hub.add(tenant)
        assert await hub.heard(tenant)
        assert hub.main.subscribe_commands == commands
        sent = nudge(tenant)
        assert await redis.publish(hub.channel(tenant), sent.to_wire()) == 1
        assert await next_of(again) == sent
    async with running(settings, linger_s=0.05) as (hub, redis):
        hub.remove(hub.add(tenant))
        await until_numsub(redis, hub.channel(tenant), 0)
        assert hub.tenants == frozenset()


async def test_a_subscription_after_an_idle_spell_keeps_the_connection(settings: Settings) -> None:
    """redis-py health-checks an idle connection before a command, with a read of its own; the
    link writes its commands without it (its reader is the only one), so no check breaks it."""
    tenant = uuid.uuid4()
    async with running(settings, health_check_s=0.2) as (hub, redis):
        await asyncio.sleep(0.5)  # the thing under test is that timer: let it expire
        subscriber = hub.add(tenant)
        assert await hub.heard(tenant)
        sent = nudge(tenant)
        assert await redis.publish(hub.channel(tenant), sent.to_wire()) == 1
        assert await next_of(subscriber) == sent
        assert hub.main.connections == 1


async def test_a_nudge_lost_while_unsubscribed_is_harmless_the_next_one_is_heard(
    settings: Settings,
) -> None:
    """Nobody here listens between the unsubscribe and the next subscriber: that nudge reaches
    nobody here (the client's (re)connect refetches), and the new subscriber sees the next one."""
    tenant = uuid.uuid4()
    async with running(settings, linger_s=0.0) as (hub, redis):
        hub.remove(hub.add(tenant))
        await until_numsub(redis, hub.channel(tenant), 0)
        lost = nudge(tenant)
        assert await redis.publish(hub.channel(tenant), lost.to_wire()) == 0
        subscriber = hub.add(tenant)
        assert await hub.heard(tenant)
        following = nudge(tenant)
        assert await redis.publish(hub.channel(tenant), following.to_wire()) == 1
        assert await next_of(subscriber) == following
        assert subscriber.backlog == 0


async def test_the_control_channel_is_heard_whatever_the_tenants(settings: Settings) -> None:
    assert settings.redis_url is not None
    heard: list[uuid.UUID | None] = []
    arrived = asyncio.Event()

    def on_control(raw: bytes | str) -> None:
        heard.append(decode_revoked(raw))
        arrived.set()

    channel = control_channel(settings.redis_url)
    async with running(settings, control_channel=channel, on_control=on_control) as (hub, redis):
        assert hub.is_live()
        assert hub.tenants == frozenset()  # no tenant: the control channel all the same
        token_id = uuid.uuid4()
        assert await redis.publish(channel, encode_revoked(token_id)) == 1
        async with asyncio.timeout(10):
            await arrived.wait()
    assert heard == [token_id]


async def _redis_7(redis: Redis) -> bool:
    version = (await redis.info("server"))["redis_version"]
    return int(str(version).split(".")[0]) >= 7


@single_redis_only(
    "SSUBSCRIBE/SPUBLISH on a Redis that is not a cluster; on a cluster nudges are always "
    "sharded, by slot over the masters (tests/realtime/test_cluster.py)"
)
async def test_sharded_pub_sub_on_a_single_redis(settings: Settings) -> None:
    """`OUTLIVE_NUDGES_SHARDED` on a Redis that is not a cluster: SSUBSCRIBE / SPUBLISH on it."""
    assert settings.redis_url is not None
    url = settings.redis_url
    tenant = uuid.uuid4()
    probe = Redis.from_url(url)
    if not await _redis_7(probe):
        await probe.aclose()
        pytest.skip("sharded pub/sub needs Redis >= 7")
    sharded = Sharded(url, Redis.from_url)
    publishing = Sharded(url, Redis.from_url)
    await publishing.discover()
    publisher = Publisher(probe, prefix=channel_prefix(url), sharded=publishing)
    try:
        async with running(settings, sharded=sharded) as (hub, redis):
            subscriber = hub.add(tenant)
            assert await hub.heard(tenant)
            assert await numsub(redis, hub.channel(tenant), sharded=True) == 1
            assert await numsub(redis, hub.channel(tenant)) == 0  # not plain pub/sub
            sent = nudge(tenant)
            await publisher.send([sent])
            assert publisher.sent == 1
            assert await next_of(subscriber) == sent
            hub.remove(subscriber)
    finally:
        await publishing.aclose()
        await probe.aclose()
