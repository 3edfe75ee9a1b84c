"""The saq queues: one for run workflows, one for typed jobs (and cron).

`OutliveRedisQueue` fixes one race in saq's Redis sweep: a worker moves a job to the active list
(BLMOVE) a moment before it marks the job ACTIVE, and the stock sweep, seeing a non-ACTIVE job in
the active list, aborts and re-queues a job that is about to run (tobymao/saq#124, #277). Here a
job in that state is looked at again after `settle_s`; only one that is still not ACTIVE (its
worker died in between) is swept.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from redis.asyncio import Redis
from saq.job import Job, Status
from saq.queue.redis import RedisQueue

log = logging.getLogger(__name__)

RUNS_QUEUE = "outlive-runs"
JOBS_QUEUE = "outlive-jobs"


class OutliveRedisQueue(RedisQueue):
    settle_s = 2.0

    async def sweep(self, lock: int = 60, abort: float = 5.0) -> list[str]:
        if not self._cleanup_script:
            self._cleanup_script = self.redis.register_script(_ACTIVE_JOBS_UNDER_LOCK)
        id_jobs: list[tuple[bytes, bytes | None]] = await self._cleanup_script(
            keys=[self._sweep, self._active], args=[lock], client=self.redis
        )
        suspects: list[bytes] = []
        swept: list[str] = []
        for job_id, job_bytes in id_jobs:
            job = self.deserialize(job_bytes)
            if job is None:
                await self._drop_missing(job_id)
                swept.append(job_id.decode())
            elif job.status != Status.ACTIVE:
                suspects.append(job_id)
            elif job.stuck:
                await self._sweep_job(job)
                swept.append(job_id.decode())
        if suspects:
            await asyncio.sleep(self.settle_s)
            # redis-py types a command's result as sync-or-async
            active = set(await self.redis.lrange(self._active, 0, -1))  # type: ignore[misc]
            for job_id in suspects:
                job = await self._get_job_by_id(job_id)
                if job_id in active and (
                    job is None or job.status not in (Status.ACTIVE, *_TERMINAL)
                ):
                    if job is None:
                        await self._drop_missing(job_id)
                    else:
                        await self._sweep_job(job)
                    swept.append(job_id.decode())
        return swept

    async def _sweep_job(self, job: Job, abort: float = 5.0) -> None:
        log.info("sweeping %s", job.info(False))
        await self.abort(job, error=self.swept_error_message)
        try:
            await job.refresh(abort)
        except TimeoutError:
            log.info("could not abort %s", job.key)
        if job.retryable:
            await self.retry(job, error=self.swept_error_message)
        else:
            await self.finish(job, Status.ABORTED, error=self.swept_error_message)

    async def _drop_missing(self, job_id: bytes) -> None:
        async with self.redis.pipeline(transaction=True) as pipe:
            pipe.lrem(self._active, 0, job_id)  # type: ignore[arg-type]  # bytes keys are fine
            pipe.zrem(self._incomplete, job_id)
            await pipe.execute()


_TERMINAL = (Status.COMPLETE, Status.FAILED, Status.ABORTED)

# saq's own script: the active jobs, at most once per `lock` seconds across all workers.
_ACTIVE_JOBS_UNDER_LOCK = """
local id_jobs = {}
if redis.call('EXISTS', KEYS[1]) == 0 then
    redis.call('SETEX', KEYS[1], ARGV[1], 1)
    for i, v in ipairs(redis.call('LRANGE', KEYS[2], 0, -1)) do
        id_jobs[i] = {v, redis.call('GET', v)}
    end
end
return id_jobs
"""


def create_redis(url: str, **kwargs: Any) -> Redis:
    return Redis.from_url(url, socket_connect_timeout=3, health_check_interval=30, **kwargs)


def create_queue(redis_url: str, name: str, *, max_connections: int | None = None) -> RedisQueue:
    redis = create_redis(redis_url, max_connections=max_connections)
    return OutliveRedisQueue(redis, name=name, max_concurrent_ops=50)
