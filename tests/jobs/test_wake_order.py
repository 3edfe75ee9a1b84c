"""A woken run is owed its slot now: its job goes ahead of the runs that have not started
(`OutliveRedisQueue.enqueue_first`), in the order the runs were woken. Behind a backlog of new
runs, a timer fired late by the whole backlog (30 s for 1,000 sleeps in `bench/peers.py`)."""

from __future__ import annotations

from uuid import uuid4

from outlive.ids import RunId
from outlive.jobs.queues import create_queue
from outlive.jobs.run_instances import SaqRunInstances
from tests.conftest import make_settings
from tests.support import Servers


async def test_woken_runs_go_ahead_of_new_ones_first_woken_first(servers: Servers) -> None:
    # One saq queue, on a cluster too: the order is a queue's (each of a partitioned queue's
    # partitions keeps it for the runs it holds; across them workers take partitions in turn).
    queue = create_queue(servers.redis_url, f"wake-order-{uuid4().hex}", partitions=1)
    instances = SaqRunInstances(queue, make_settings(servers))
    new = [RunId(uuid4()) for _ in range(3)]
    woken = [RunId(uuid4()) for _ in range(5)]

    async def next_keys(count: int) -> list[str]:
        jobs = [await queue.dequeue(timeout=1) for _ in range(count)]
        return [job.key for job in jobs if job is not None]

    try:
        await instances.start(new[0])
        await instances.start(new[1])
        await instances.resume(woken[0])
        await instances.start(new[2])
        await instances.resume(woken[1])
        await instances.resume(woken[2])
        await instances.resume(woken[1])  # a no-op while its job is queued, like `start`
        assert await next_keys(2) == [str(woken[0]), str(woken[1])]
        await instances.resume(woken[3])  # after the woken run still waiting
        assert await next_keys(3) == [str(woken[2]), str(woken[3]), str(new[0])]
        await instances.resume(woken[4])  # no woken run waits now: at the head
        assert await next_keys(3) == [str(woken[4]), str(new[1]), str(new[2])]
    finally:
        keys = await queue.redis.keys("saq:*wake-order*")
        if keys:
            await queue.redis.delete(*keys)
        await queue.disconnect()
