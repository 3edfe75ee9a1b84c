"""Benchmark: the same runs on one Redis and on a Redis Cluster of 3 masters (and 3 replicas).

    uv run python bench/cluster.py [--runs 1000] [--rounds 2]

Each round, on each Redis in turn: `--runs` `demo` runs (1 turn, no delay) of as many tenants
are inserted admitted and handed to the run queue (on the cluster: 3 partitions, one per
master), then one `outlive worker --concurrency 32` process starts with that `REDIS_URL`.
Printed: runs/s from the first claim to the last settle (database timestamps), the worker's CPU
per run (user + system, from /proc, sampled before it stops), and the Redis servers' CPU per run
(`used_cpu_user + used_cpu_sys` of every master, before and after).

The cluster is started by the bench (`tests.redis_cluster`: `redis-server` and `redis-cli` >= 7
on the PATH); one Redis is BENCH_REDIS_URL's (default the local one). On a loaded machine the
figures are noisy: compare the two rows of one round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg
from redis.asyncio import Redis

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _common import Env, bench_env, outlive, table
from runs import INPUT, make_tenants, tree_cpu_s

from outlive.config import Settings
from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue
from outlive.jobs.relay import MARKER_KEY, marker_keys
from outlive.jobs.run_instances import SaqRunInstances
from tests.redis_cluster import MISSING, TOOLS, RedisClusterNodes, flush_redis

PARTITIONS = 3


async def redis_cpu_s(url: str) -> float:
    """CPU seconds of the Redis server (every master of a cluster)."""
    hosts = url.split("://", 1)[1].split("/")[0].split(",")
    urls = [f"redis://{h}/0" for h in hosts] if "+cluster://" in url else [url]
    total = 0.0
    for node in urls:
        client = Redis.from_url(node)
        try:
            if "+cluster://" in url and (await client.role())[0] != b"master":
                continue
            info = await client.info("cpu")
        finally:
            await client.aclose()
        total += float(info["used_cpu_user"]) + float(info["used_cpu_sys"])
    return total


async def one(env: Env, redis_url: str, tenants: Sequence[tuple[object, str]]) -> list[object]:
    """One measurement: runs/s, worker CPU ms per run, Redis CPU ms per run."""
    partitions = PARTITIONS if "+cluster://" in redis_url else 1
    flush_redis(redis_url)
    runs = create_queue(redis_url, RUNS_QUEUE, partitions=partitions)
    jobs = create_queue(redis_url, JOBS_QUEUE, partitions=partitions)
    for key in marker_keys(
        MARKER_KEY, runs, jobs
    ):  # a healthy queue: the relays hand nothing again
        await runs.redis.set(key, "1")
    settings = Settings(database_url=env.database_url, redis_url=redis_url, queue_timeout_s=60)
    instances = SaqRunInstances(runs, settings)
    conn = await asyncpg.connect(env.database_url)
    await conn.execute("DELETE FROM runs")
    ids = [
        r["id"]
        for r in await conn.fetch(
            "INSERT INTO runs (tenant_id, agent, input, dispatched_at)"
            " SELECT t, 'demo', $2::jsonb, now() FROM unnest($1::uuid[]) AS t RETURNING id",
            [t for t, _ in tenants],
            json.dumps(INPUT),
        )
    ]
    await asyncio.gather(*(instances.start(i) for i in ids))
    redis_before = await redis_cpu_s(redis_url)
    with outlive("worker", "--concurrency", "32", env={**env.vars(), "REDIS_URL": redis_url}) as w:
        deadline = time.monotonic() + 600
        while await conn.fetchval(
            "SELECT count(*) FROM runs WHERE status IN ('QUEUED', 'RUNNING')"
        ):
            if time.monotonic() > deadline:
                raise RuntimeError("runs did not finish in 10 minutes")
            await asyncio.sleep(0.25)
        worker_cpu = tree_cpu_s(w.pid)
    redis_cpu = await redis_cpu_s(redis_url) - redis_before
    first, last, ok = await conn.fetchrow(
        "SELECT min(started_at), max(finished_at), count(*) FILTER (WHERE status = 'SUCCEEDED')"
        " FROM runs"
    )
    await conn.close()
    await runs.disconnect()
    await jobs.disconnect()
    if ok != len(ids):
        raise RuntimeError(f"only {ok} of {len(ids)} runs succeeded")
    count = len(ids)
    return [
        f"{count / (last - first).total_seconds():.0f}",
        f"{1000 * worker_cpu / count:.2f}",
        f"{1000 * redis_cpu / count:.3f}",
    ]


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    if TOOLS is None:
        raise SystemExit(MISSING)
    rows = []
    with tempfile.TemporaryDirectory(prefix="outlive-bench-cluster-") as directory:
        nodes = RedisClusterNodes.start(Path(directory))
        try:
            async with bench_env() as env:
                conn = await asyncpg.connect(env.database_url)
                tenants = await make_tenants(conn, args.runs)
                await conn.close()
                for round_ in range(1, args.rounds + 1):
                    for label, url in (
                        ("one Redis", env.redis_url),
                        ("3-master cluster", nodes.url),
                    ):
                        rows.append([round_, label, *await one(env, url, tenants)])
        finally:
            nodes.stop()
    print(table(rows, ["round", "Redis", "runs/s", "worker CPU ms/run", "Redis CPU ms/run"]))


if __name__ == "__main__":
    asyncio.run(main())
