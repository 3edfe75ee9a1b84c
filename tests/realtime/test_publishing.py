"""Publishing is optional by design: with realtime off or Redis pub/sub down every mutation still
succeeds and the failure is logged; on the request path a nudge is never awaited."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import AsyncIterator, Sequence
from datetime import UTC, datetime

import httpx
import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.realtime.nudges import NUDGE_TYPES, Nudge, Publisher, channel_prefix
from tests.conftest import make_settings
from tests.realtime.clients import (
    NUDGE_KEYS,
    ApiProcess,
    Channel,
    Socket,
    private_redis,
    publisher,
    serve,
)
from tests.support import Api, Servers, TenantHandle, service_env


@contextlib.asynccontextmanager
async def graphql(url: str) -> AsyncIterator[Api]:
    async with httpx.AsyncClient(base_url=url, timeout=30) as client:
        yield Api(client)


def sentinel(tenant: TenantHandle) -> Nudge:
    return Nudge("invitation.updated", tenant.id, datetime.now(UTC), uuid.uuid4())


async def test_with_realtime_off_mutations_succeed_and_nothing_is_published(
    settings: Settings, tenant: TenantHandle
) -> None:
    assert settings.redis_url is not None
    env = service_env(settings, OUTLIVE_REALTIME="0")
    async with (
        ApiProcess.running(env) as api,
        Channel(settings.redis_url, tenant.id) as channel,
        publisher(settings) as ours,
    ):
        await api.saw(r"realtime is off \(OUTLIVE_REALTIME=0\)")
        async with Socket.open(api.url, token=tenant.token) as sock, graphql(api.url) as http:
            await sock.subscribe()  # accepted, and quiet: clients refresh on fetch
            run = (await http.start_run(tenant.token, input={"turns": 1}))["run"]
            assert (await http.cancel(tenant.token, run["id"]))["status"] == "CANCELLED"
            marker = sentinel(tenant)
            await ours.send([marker])
            # Whatever the API had published would have reached Redis before this marker.
            assert await channel.next() == marker.to_graphql()
            await sock.sync()  # still open
        assert "realtime: subscribed" not in api.log


async def test_with_redis_down_mutations_succeed_and_the_failure_is_logged(
    settings: Settings, tenant: TenantHandle
) -> None:
    async with private_redis() as redis:
        env = service_env(settings, REDIS_URL=redis.url)
        async with ApiProcess.running(env) as api, graphql(api.url) as http:
            await api.saw(r"realtime: subscribed to outlive:0:nudges:")
            run = (await http.start_run(tenant.token, input={"turns": 1}))["run"]
            redis.kill()
            await api.saw(r"realtime: subscription lost")

            cancelled = await http.cancel(tenant.token, run["id"])

            assert cancelled["status"] == "CANCELLED"
            await api.saw(r"realtime publish failed \(.*\): 2 nudge\(s\) dropped")
            async with Socket.open(api.url, token=tenant.token) as sock:
                await sock.subscribe()  # the socket works without Redis; it is only quiet
            assert (await http.run(tenant.token, run["id"]) or {})["status"] == "CANCELLED"


async def test_a_request_never_waits_for_its_nudge(servers: Servers, tenant: TenantHandle) -> None:
    async with private_redis() as redis:
        settings = make_settings(servers, redis_url=redis.url)
        admin = Redis.from_url(redis.url)
        async with (
            serve(settings) as served,
            graphql(served.url) as http,
            Channel(redis.url, tenant.id) as channel,
        ):
            run = (await http.start_run(tenant.token, input={"turns": 1}))["run"]
            assert (await channel.next())["type"] == "run.created"
            publisher: Publisher = served.app.state.runtime.require_queues().publisher
            await admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # PUBLISH waits
            try:
                cancelled = await http.cancel(tenant.token, run["id"])
                assert cancelled["status"] == "CANCELLED"
                assert publisher.pending == 2  # answered while its two nudges wait on Redis
            finally:
                await admin.execute_command("CLIENT", "UNPAUSE")
            await publisher.drain()
            heard = [await channel.next(), await channel.next()]
        await admin.aclose()
    assert sorted(n["type"] for n in heard) == ["run.event", "run.updated"]
    assert {n["id"] for n in heard} == {run["id"]}


async def test_what_commits_while_a_send_is_on_the_wire_goes_in_one_pipeline_in_order(
    tenant: TenantHandle,
) -> None:
    """A unit of work never waits for Redis (a worker's step neither): its nudges join the
    process's queue, and what queues up behind a send in flight leaves in the next pipeline,
    in the order it was committed."""
    async with private_redis() as redis:
        admin, client = Redis.from_url(redis.url), Redis.from_url(redis.url)
        ours = Publisher(client, prefix=channel_prefix(redis.url))
        sends: list[int] = []
        send = ours.send

        async def counted(nudges: Sequence[Nudge]) -> None:
            sends.append(len(nudges))
            await send(nudges)

        ours.send = counted  # type: ignore[method-assign]
        units = [sentinel(tenant) for _ in range(50)]
        async with Channel(redis.url, tenant.id) as channel:
            await admin.execute_command("CLIENT", "PAUSE", 60_000, "WRITE")  # PUBLISH waits
            try:
                async with asyncio.timeout(1):  # 50 units commit, a nudge each; none waits
                    await ours.defer(units[:1])
                    await asyncio.sleep(0)  # the sender takes the first onto the wire
                    for unit in units[1:]:
                        await ours.defer([unit])
                assert ours.pending == 50
            finally:
                await admin.execute_command("CLIENT", "UNPAUSE")
            await ours.drain()
            heard = [await channel.next() for _ in units]
        await admin.aclose()
        await client.aclose()
    assert heard == [u.to_graphql() for u in units]
    assert sends == [1, 49]  # the first alone (nothing else was queued yet), the rest together


def test_a_nudge_is_its_four_fields_and_a_known_type() -> None:
    tenant_id = uuid.uuid4()
    nudge = Nudge("run.event", tenant_id, datetime.now(UTC), uuid.uuid4())
    assert set(nudge.to_graphql()) == NUDGE_KEYS
    assert Nudge.from_wire(nudge.to_wire()) == nudge
    assert Nudge.from_wire(Nudge("run.created", tenant_id, nudge.at).to_wire()).id is None
    with pytest.raises(ValueError, match="unknown nudge type"):
        Nudge("run.deleted", tenant_id, datetime.now(UTC))  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="offset"):
        Nudge("run.event", tenant_id, datetime.now())  # noqa: DTZ005
    assert {
        "run.created",
        "run.updated",
        "run.event",
        "invitation.updated",
        "webhook.delivery.updated",
        "replay.updated",  # an addition to contract §5, with replayRuns
        "member.updated",  # round five (§5)
        "budget.updated",
        "schedule.updated",
    } == NUDGE_TYPES


async def test_an_unknown_nudge_type_is_logged_and_the_change_stands(
    sessions: Sessions,
    settings: Settings,
    tenant: TenantHandle,
    caplog: pytest.LogCaptureFixture,
) -> None:
    renamed = f"renamed {uuid.uuid4()}"
    async with publisher(settings) as pub:
        wired = sessions.wired(nudge_sink=pub.defer)
        with caplog.at_level(logging.ERROR):
            async with wired.unit(tenant.id) as uow:
                await uow.session.execute(
                    text("UPDATE tenants SET name = :name WHERE id = :id"),
                    {"name": renamed, "id": tenant.id},
                )
                uow.nudge("run.exploded", uuid.uuid4())
    assert "nudge sink failed" in caplog.text
    assert pub.sent == 0
    found = await sessions.one(text("SELECT name FROM tenants WHERE id = :id"), id=tenant.id)
    assert found is not None
    assert found["name"] == renamed
