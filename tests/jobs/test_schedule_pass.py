"""The schedule pass (`outlive.jobs.schedule_pass`): saq's script for every partition of both
queues in one Redis round trip, moving what is due and nothing else, after a lost script cache
too; in a worker host the jobs worker's pass covers the runs queue."""

from __future__ import annotations

import time
from typing import Any

import pytest
from redis.asyncio.connection import AbstractConnection

from outlive.config import Settings
from outlive.jobs.queues import OutliveRedisQueue, create_queue
from outlive.jobs.schedule_pass import SchedulePass
from outlive.runtime import open_runtime
from outlive.worker import WorkerHost


async def _due_and_later(queue: OutliveRedisQueue, tag: str) -> tuple[list[str], str]:
    """A job due a second ago on each partition, and one due in an hour: their ids."""
    due: dict[str, str] = {}  # partition name -> job id
    now, n = int(time.time()), 0
    while len(due) < len(queue.partitions):  # keys until every partition holds one
        key, n = f"{tag}-due-{n}", n + 1
        if queue.partition(key).name not in due:
            job = await queue.enqueue("noop", key=key, scheduled=now - 1)
            assert job is not None
            due[queue.partition(key).name] = job.id
    later = await queue.enqueue("noop", key=f"{tag}-later", scheduled=now + 3600)
    assert later is not None
    return list(due.values()), later.id


async def _queued(queue: OutliveRedisQueue) -> set[str]:
    ids = set()
    for part in queue.partitions:
        ids |= {i.decode() for i in await part.redis.lrange(part._queued, 0, -1)}
    return ids


async def test_one_round_trip_moves_what_is_due_on_every_partition_of_both_queues(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = settings.redis_url or ""
    runs = create_queue(url, "pass-runs", partitions=2)
    jobs = create_queue(url, "pass-jobs")
    try:
        (runs_due, runs_later), (jobs_due, jobs_later) = [
            await _due_and_later(q, q.name) for q in (runs, jobs)
        ]
        assert len(runs_due) == 2  # one on each partition
        sent: list[Any] = []
        send = AbstractConnection.send_packed_command

        async def counted(
            self: AbstractConnection, command: Any, check_health: bool = True
        ) -> None:
            sent.append(command)
            await send(self, command, check_health)

        passes = SchedulePass([runs, jobs])
        monkeypatch.setattr(AbstractConnection, "send_packed_command", counted)
        moved = await passes(1)
        monkeypatch.undo()

        assert len(sent) == 1  # three partitions, one round trip
        assert sorted(moved) == sorted(runs_due + jobs_due)
        assert await _queued(runs) == set(runs_due)
        assert await _queued(jobs) == set(jobs_due)
        assert runs_later not in moved
        assert jobs_later not in moved
        assert await passes(1) == []  # the queues' locks hold for the second: saq's own rule
    finally:
        for queue in (runs, jobs):
            await queue.disconnect()


async def test_a_pass_after_the_server_lost_its_scripts_still_moves_what_is_due(
    settings: Settings,
) -> None:
    """A Redis restart empties the script cache: EVALSHA answers NOSCRIPT, and the pass sends
    the script itself (as redis-py's own scripts do)."""
    url = settings.redis_url or ""
    queue = create_queue(url, "pass-flushed")
    try:
        passes = SchedulePass([queue])
        assert await passes(1) == []  # the script is known to the server now
        due, _ = await _due_and_later(queue, "flushed")
        await queue.redis.delete(queue.schedule_keys()[0])  # the first pass's lock
        await queue.redis.script_flush()
        assert await passes(1) == due
        assert await _queued(queue) == set(due)
    finally:
        await queue.disconnect()


async def test_in_a_worker_host_the_jobs_workers_pass_moves_the_runs_queues_due_jobs(
    settings: Settings,
) -> None:
    async with open_runtime(settings, "worker") as runtime:
        queues = runtime.require_queues()
        host = WorkerHost(settings, concurrency=1, jobs_concurrency=1)
        runs_worker, jobs_worker = host.saq_workers(queues, host.deps_for(runtime))
        job = await queues.runs.enqueue("noop", key="due-run", scheduled=int(time.time()) - 1)
        assert job is not None
        await runs_worker.schedule()
        assert job.id not in await _queued(queues.runs)  # the runs worker makes no round trip
        await jobs_worker.schedule()
        assert job.id in await _queued(queues.runs)
        await queues.runs.redis.delete(job.id, queues.runs.schedule_keys()[1])
