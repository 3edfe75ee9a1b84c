"""The queue's sweep re-delivers a dead worker's job in one atomic step, never a live one's, and a
sweeper killed at any moment leaves the job deliverable."""

from __future__ import annotations

import asyncio
import signal
import sys
import uuid
from collections.abc import AsyncIterator

import pytest
from saq.job import Job, Status
from saq.utils import now

from outlive.config import Settings
from outlive.jobs.queues import RUNS_QUEUE, OutliveRedisQueue, create_queue

SWEEPER = """
import asyncio, sys
from outlive.jobs.queues import create_queue

async def main() -> None:
    queue = create_queue(sys.argv[1], sys.argv[2])
    while True:
        await queue.sweep(lock=1)

asyncio.run(main())
"""


@pytest.fixture
async def queue(settings: Settings) -> AsyncIterator[OutliveRedisQueue]:
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE)
    assert isinstance(queue, OutliveRedisQueue)
    yield queue
    await queue.disconnect()


async def taken(queue: OutliveRedisQueue, *, retries: int = 5, mark_active: bool = True) -> Job:
    """A job a worker took (BLMOVE to the active list) and then died holding: its heartbeat is a
    minute old."""
    await queue.enqueue("run_workflow", key=str(uuid.uuid4()), heartbeat=1, retries=retries)
    job = await queue.dequeue(timeout=1)
    assert job is not None
    if mark_active:
        job.attempts, job.started, job.status = 1, now(), Status.ACTIVE
        job.touched = now() - 60_000
        await queue.redis.set(job.id, queue.serialize(job))
    return job


async def where(queue: OutliveRedisQueue, job: Job) -> tuple[str | None, int, int, bool]:
    """(status, times in the queued list, times in the active list, in the incomplete set)."""
    stored = await queue.job(job.key)
    queued = await queue.redis.lrange(queue._queued, 0, -1)
    active = await queue.redis.lrange(queue._active, 0, -1)
    score = await queue.redis.zscore(queue._incomplete, job.id)
    status = None if stored is None else str(stored.status.value)
    job_id = job.id.encode()
    return status, queued.count(job_id), active.count(job_id), score is not None


async def test_a_dead_worker_s_job_is_requeued(queue: OutliveRedisQueue) -> None:
    job = await taken(queue)
    assert await queue.sweep(lock=1) == [job.id]
    assert await where(queue, job) == ("queued", 1, 0, True)
    assert await queue.sweep(lock=1) == []  # once only


async def test_a_job_touched_after_the_sweeper_read_it_is_left_alone(
    queue: OutliveRedisQueue,
) -> None:
    job = await taken(queue)
    seen = await queue.redis.get(job.id)
    await job.update()  # its worker heartbeats: it is alive after all
    assert not await queue.repair(job.id.encode(), seen)
    assert await where(queue, job) == ("active", 0, 1, True)


async def test_a_job_out_of_attempts_is_finished_aborted(queue: OutliveRedisQueue) -> None:
    job = await taken(queue, retries=1)
    assert await queue.sweep(lock=1) == [job.id]
    assert await where(queue, job) == ("aborted", 0, 0, False)
    assert await queue.redis.ttl(job.id) > 0


async def test_a_job_whose_worker_died_before_marking_it_active_is_requeued(
    queue: OutliveRedisQueue,
) -> None:
    queue.settle_s = 0.05
    job = await taken(queue, mark_active=False)  # BLMOVE'd, never marked: the worker died
    assert await queue.sweep(lock=1) == [job.id]
    assert await where(queue, job) == ("queued", 1, 0, True)


async def test_a_job_marked_active_after_the_sweeper_read_it_is_left_alone(
    queue: OutliveRedisQueue,
) -> None:
    job = await taken(queue, mark_active=False)
    seen = await queue.redis.get(job.id)  # what the sweep read, before it settles
    await job.update(status=Status.ACTIVE)  # its worker was only slow
    assert not await queue.repair(job.id.encode(), seen)
    assert await where(queue, job) == ("active", 0, 1, True)


async def test_a_sweeper_killed_mid_sweep_leaves_the_job_deliverable(
    queue: OutliveRedisQueue, settings: Settings
) -> None:
    job = await taken(queue)
    pubsub = queue.redis.pubsub()
    await pubsub.subscribe(job.id)  # every sweep step announces the job's new status here
    assert (await pubsub.get_message(timeout=5) or {}).get("type") == "subscribe"
    sweeper = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        SWEEPER,
        settings.redis_url or "",
        RUNS_QUEUE,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )
    try:
        async with asyncio.timeout(30):
            message = None
            while message is None:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=1)
        sweeper.send_signal(signal.SIGKILL)  # killed the moment it touched the job
    finally:
        if sweeper.returncode is None:
            sweeper.kill()
        await sweeper.wait()
        await pubsub.aclose()
    await queue.sweep(lock=1)  # whatever the next sweep has to do
    status, queued, active, incomplete = await where(queue, job)
    assert (status, queued + active, incomplete) == ("queued", 1, True), (
        f"after {message['data']!r} the job was left {status}, {queued} queued, {active} active"
    )
