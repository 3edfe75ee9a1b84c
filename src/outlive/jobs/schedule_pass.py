"""saq's schedule pass for every queue a worker process consumes, in one Redis round trip.

saq's worker runs its queue's `schedule` every second: a Lua script that, under a lock key of the
queue's own (so that of all the queue's workers one a second does it), moves the scheduled jobs
whose time has come (a run's retry, a webhook delivery's next attempt, a cron fire) to the queued
list. A worker host runs two saq workers, runs and jobs, so an idle cell paid two Redis round
trips a second for it, the largest of its idle costs left (`bench/cells.py`, counted by caller;
docs/cells.md). Here the jobs worker's pass runs the script for every consumed partition of both
queues in one pipeline, and the runs worker's pass has nothing of its own to do.

The script is saq's (`saq.queue.redis.RedisQueue.schedule`), with its keys and arguments, so a
worker of either kind (this pass or saq's own, as an older Outlive runs it) takes the same lock
and a job is never moved twice. On a Redis Cluster each partition is a slot of its own, likely
on another node, so there each partition's pass runs as saq's, concurrently.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from redis.exceptions import NoScriptError
from saq.utils import now_seconds

from outlive.jobs.queues import OutliveRedisQueue
from outlive.jobs.redis import is_cluster

# saq 0.26's, byte for byte: KEYS = the lock, the incomplete set, the queued list;
# ARGV = the lock's seconds, now.
SCHEDULE = """
                if redis.call('EXISTS', KEYS[1]) == 0 then
                    redis.call('SETEX', KEYS[1], ARGV[1], 1)
                    local jobs = redis.call('ZRANGEBYSCORE', KEYS[2], 1, ARGV[2])

                    for _, v in ipairs(jobs) do
                        redis.call('ZADD', KEYS[2], 0, v)
                        redis.call('RPUSH', KEYS[3], v)
                    end

                    return jobs
                end
                """


class SchedulePass:
    """One pass over the consumed partitions of `queues` (none: a pass with nothing to do)."""

    def __init__(self, queues: Sequence[OutliveRedisQueue]) -> None:
        self._queues = queues
        self._parts = [part for queue in queues for part in queue.consumed]
        self._script = None
        if self._parts and not is_cluster(self._parts[0].redis):
            self._script = self._parts[0].redis.register_script(SCHEDULE)

    async def __call__(self, lock: int) -> list[str]:
        """The ids of the jobs moved to their queued lists."""
        if self._script is None:  # a cluster (or nothing): each queue's own pass
            done = await asyncio.gather(*(queue.schedule(lock) for queue in self._queues))
            return [job_id for ids in done for job_id in ids]
        moved = await self._pipelined(lock, evalsha=True)
        return [job_id.decode() for ids in moved for job_id in ids or ()]

    async def _pipelined(self, lock: int, *, evalsha: bool) -> list[list[bytes] | None]:
        """The script on every partition in one round trip: EVALSHA, and EVAL (which caches it)
        when the server lost it (a restart, SCRIPT FLUSH): once, for all of them."""
        assert self._script is not None  # noqa: S101 (a plain Redis: `__call__`)
        at = now_seconds()
        async with self._script.registered_client.pipeline(transaction=False) as pipe:
            for part in self._parts:
                keys = part.schedule_keys()
                if evalsha:
                    pipe.evalsha(self._script.sha, len(keys), *keys, lock, at)
                else:
                    pipe.eval(SCHEDULE, len(keys), *keys, lock, at)
            results = await pipe.execute(raise_on_error=False)
        if evalsha and any(isinstance(r, NoScriptError) for r in results):
            return await self._pipelined(lock, evalsha=False)
        for result in results:
            if isinstance(result, Exception):
                raise result
        return results
