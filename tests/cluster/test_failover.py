"""A Redis Cluster master lost under load, and the whole cluster lost: nothing a run did is lost,
nothing is done twice, nothing fails for it.

1. Runs of 3 turns (200 ms apart) from three tenants are started through the API, more than the
   worker's slots and the tenants' caps, and while they run the master that holds the first run
   partition is SIGKILLed (as a lost machine). Its replica is promoted after
   `cluster-node-timeout` (1.5 s here); meanwhile commands to its slots fail, the API's hand-offs
   go to the relay, the worker's heartbeats fail. Then every run SUCCEEDED, each `turn` event
   exactly once (a turn done twice would be there twice), and every run started is there.
2. Every node killed and a new, empty cluster made on the same ports (Redis lost, data and all):
   the relay sees its markers gone and hands every due row again; runs started before the loss
   and left QUEUED, and runs started after it, all succeed.

`OUTLIVE_CLUSTER_RUNS` (default 30) sets the runs of the first test: sized to take well under a
minute on two cores."""

from __future__ import annotations

import asyncio
import gc
import os
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any
from uuid import uuid4

import asyncpg
import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.worker import WorkerHost
from tests.conftest import make_settings, new_tenant, with_own_database
from tests.redis_cluster import RedisClusterNodes
from tests.support import Api, Servers, TenantHandle
from tests.workflows.test_children import start

pytestmark = [
    pytest.mark.timeout(300),
    # A killed master and a replaced cluster leave redis-py's cluster client holding nodes and
    # connections to servers that are gone; it drops them on its topology refresh without
    # disconnecting them, and their finalisers warn. Those warnings are redis-py's, about peers
    # that no longer exist: this module's subject is what becomes of the runs.
    pytest.mark.filterwarnings("ignore::pytest.PytestUnraisableExceptionWarning"),
]
RUNS = int(os.environ.get("OUTLIVE_CLUSTER_RUNS", "30"))
TURNS = 3
SETTLE_S = 120.0


@pytest.fixture(autouse=True)
def _collect_dropped_nodes() -> Iterator[None]:
    """The dropped nodes' finalisers run here, under this module's filter, not in whichever
    test the garbage collector happens to run next."""
    yield
    gc.collect()


@pytest.fixture
async def servers(servers: Servers) -> Servers:
    return await with_own_database(servers)  # the runs counted are this test's alone


@pytest.fixture
async def host(settings: Settings) -> AsyncIterator[WorkerHost]:
    worker = WorkerHost(settings, concurrency=8)
    await worker.start()
    yield worker
    await worker.stop()


async def _start_many(api: Api, tenants: list[TenantHandle], count: int) -> list[str]:
    started = []
    for i in range(count):
        tenant = tenants[i % len(tenants)]
        started.append(await start(api, tenant, "demo", uuid4().hex, turns=TURNS, delayMs=200))
    return started


async def _settled(database_url: str, run_ids: list[str]) -> dict[str, Any]:
    """Wait until every run is settled (PostgreSQL is the witness: the nudges' Redis is the
    thing being killed); then what the runs and their timelines say."""
    conn = await asyncpg.connect(database_url)
    try:
        deadline = time.monotonic() + SETTLE_S
        while True:
            left = await conn.fetchval(
                "SELECT count(*) FROM runs WHERE status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
            )
            if left == 0:
                break
            if time.monotonic() > deadline:
                rows = await conn.fetch(
                    "SELECT id, status, attempt, worker_id, lease_expires_at, handoff_failed_at,"
                    " relay_after, dispatched_at FROM runs"
                    " WHERE status NOT IN ('SUCCEEDED', 'FAILED', 'CANCELLED')"
                )
                raise AssertionError(f"{left} run(s) never settled: {[dict(r) for r in rows]}")
            await asyncio.sleep(0.5)
        statuses = dict(await conn.fetch("SELECT id::text, status FROM runs"))
        turns = await conn.fetch(
            "SELECT run_id::text, data->>'turn' AS turn, count(*) AS n FROM run_events"
            " WHERE type = 'turn' GROUP BY 1, 2"
        )
    finally:
        await conn.close()
    doubled = [(t["run_id"], t["turn"]) for t in turns if t["n"] != 1]
    per_run = {r: sum(1 for t in turns if t["run_id"] == r) for r in run_ids}
    return {
        "statuses": statuses,
        "doubled": doubled,
        "short": [r for r, n in per_run.items() if n != TURNS],
        "lost": [r for r in run_ids if r not in statuses],
    }


async def test_a_master_killed_under_load_loses_doubles_and_fails_nothing(
    servers: Servers, sessions: Sessions, cluster: RedisClusterNodes, host: WorkerHost
) -> None:
    settings = host.settings
    tenants = [await new_tenant(sessions, f"c{i}") for i in range(3)]
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE, partitions=3)
    cluster_client: Any = queue.redis
    await cluster_client.initialize()
    victim_node = cluster_client.get_node_from_key(queue.partitions[0].name)
    await queue.disconnect()
    victim = int(victim_node.port)
    assert victim in cluster.master_ports()

    async with Api.running(settings) as api:
        started = await _start_many(api, tenants, RUNS // 2)
        cluster.kill(victim)  # under load: runs executing, more queued
        killed_at = time.monotonic()
        started += await _start_many(api, tenants, RUNS - RUNS // 2)  # during the failover
        outcome = await _settled(settings.database_url or "", started)
    assert victim not in cluster.master_ports()
    assert len(cluster.master_ports()) == 3  # its replica took its slots over
    assert outcome["lost"] == []
    assert outcome["doubled"] == []
    assert outcome["short"] == []
    failed = {r: s for r, s in outcome["statuses"].items() if s != "SUCCEEDED"}
    assert failed == {}
    assert len(outcome["statuses"]) == RUNS
    print(f"\n{RUNS} runs, master killed, all settled {time.monotonic() - killed_at:.1f}s after")  # noqa: T201


async def test_the_whole_cluster_lost_and_replaced_empty_the_relay_hands_everything_again(
    servers: Servers, sessions: Sessions, cluster: RedisClusterNodes
) -> None:
    settings = make_settings(servers, redis_url=cluster.url, relay_scan_s=1.0)
    tenant = await new_tenant(sessions, "lost")
    async with Api.running(settings) as api:
        before = await _start_many(api, [tenant], 6)  # queued in Redis, no worker yet
        cluster.restart_empty()  # every node gone; a new cluster, empty
        after = await _start_many(api, [tenant], 2)
    worker = WorkerHost(settings, concurrency=8)
    await worker.start()
    try:
        outcome = await _settled(settings.database_url or "", before + after)
    finally:
        await worker.stop()
    assert outcome["lost"] == outcome["doubled"] == outcome["short"] == []
    assert set(outcome["statuses"].values()) == {"SUCCEEDED"}
