"""saq's transactions on a cluster (`pipeline(transaction=True)`: MULTI/EXEC on the node of the
commands' one slot) queue their commands without a thread each (`outlive.jobs.redis.
_KeyedTransaction`): redis-py 7 ran each queued command's slot lookup in a new thread with its
own event loop, about a third of a worker's Redis time on a cluster (docs/scale.md)."""

from __future__ import annotations

import threading
from typing import Any

import pytest
from redis.exceptions import CrossSlotTransactionError

from outlive.jobs.redis import create_redis
from tests.redis_cluster import RedisClusterNodes

TAG = "{outlive-runs-0}"


@pytest.fixture
def threads(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The names of the threads started during the test."""
    started: list[str] = []
    start = threading.Thread.start

    def counted(self: threading.Thread) -> None:
        started.append(self.name)
        start(self)

    monkeypatch.setattr(threading.Thread, "start", counted)
    return started


async def test_a_transaction_queues_without_a_thread_and_applies_its_commands_together(
    cluster: RedisClusterNodes, threads: list[str]
) -> None:
    client: Any = create_redis(cluster.url)
    try:
        active, incomplete, job = f"saq:{TAG}:active", f"saq:{TAG}:incomplete", f"saq:job:{TAG}:j1"
        await client.rpush(active, "j1", "j2")
        async with client.pipeline(transaction=True) as pipe:  # as saq's `_finish` does
            pipe = pipe.lrem(active, 1, "j1").zadd(incomplete, {"j1": 1}).setex(job, 60, "done")
            assert await pipe.execute() == [1, 1, True]
        assert threads == []
        assert await client.lrange(active, 0, -1) == [b"j2"]
        assert await client.zrange(incomplete, 0, -1) == [b"j1"]
        assert await client.get(job) == b"done"

        # keys of two slots in one transaction are refused as before, and nothing is applied
        async with client.pipeline(transaction=True) as pipe:
            pipe.set(f"x:{TAG}", "1").set("x:{another-slot}", "1")
            with pytest.raises(CrossSlotTransactionError):
                await pipe.execute()
        assert await client.get(f"x:{TAG}") is None
    finally:
        await client.aclose()
