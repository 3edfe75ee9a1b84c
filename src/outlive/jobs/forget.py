"""What Redis keeps of erased runs, forgotten (`eraseSubject`, contract §7).

A run's queue job carries only its id, and its output stream (`ctx.stream`) expires minutes after
it ends; an erasure removes both at once all the same: the job of each run that is queued or
scheduled (and its record; a job a worker is executing is left to end on its own: its run row
is gone, so it writes nothing), and every key of its output stream. Redis being unreachable
costs nothing durable: it is logged, and the keys expire on their own.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from uuid import UUID

from redis.asyncio import Redis
from redis.exceptions import RedisError
from saq.queue.redis import RedisQueue

from outlive.realtime.outputs import keys_of

log = logging.getLogger(__name__)


class RunForgetter:
    def __init__(self, runs: RedisQueue, redis: Redis) -> None:
        self.runs, self.redis = runs, redis

    async def __call__(self, run_ids: Sequence[UUID]) -> None:
        jobs = [self.runs.job_id(str(run_id)) for run_id in run_ids]
        try:
            async with self.redis.pipeline(transaction=False) as pipe:
                for job_id in jobs:
                    pipe.lpos(self.runs.namespace("active"), job_id)
                active = await pipe.execute()
            async with self.redis.pipeline(transaction=False) as pipe:
                for run_id, job_id, executing in zip(run_ids, jobs, active, strict=True):
                    if executing is None:
                        pipe.lrem(self.runs.namespace("queued"), 0, job_id)
                        pipe.zrem(self.runs.namespace("schedule"), job_id)
                        pipe.zrem(self.runs.namespace("incomplete"), job_id)
                        pipe.delete(job_id)
                    for key in keys_of(run_id):
                        pipe.delete(key)
                await pipe.execute()
        except (RedisError, OSError):
            log.warning("could not reach Redis to forget %d erased run(s)", len(jobs))
