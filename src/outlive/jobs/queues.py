"""The saq queues: one for run workflows, one for typed jobs (and cron).

`OutliveRedisQueue` replaces saq's Redis sweep, which re-delivers a job whose worker died, with one
that is crash-safe at every step:

- saq's sweep aborts the job, waits up to 5 s, then re-queues it: a sweeper killed in between left
  the job `aborting` in no list, where nothing would ever deliver it again. Here each repair is one
  Lua script (`_REPAIR`), a compare-and-set on the job's record: it re-queues (or, out of
  attempts, finishes ABORTED) only if the record is still byte for byte what the sweeper read, and
  does all of it atomically. A sweeper that dies before the script leaves the job in the active
  list for the next sweep; one that dies after has nothing left to do.
- a worker moves a job to the active list (BLMOVE) a moment before it marks the job ACTIVE, and
  the stock sweep, seeing a non-ACTIVE job in the active list, re-queues a job that is about to
  run (tobymao/saq#124, #277). Here a job in that state is looked at again after `settle_s`, and
  the compare-and-set repairs it only if its worker never marked it (it died in between).
- a live worker's heartbeat changes the record, so a job that was touched after the sweeper read
  it is never repaired.

Nothing here aborts a job in a worker that may still be running it: for runs, the row's lease
fences a stalled attempt (see `outlive.services.runs`); jobs-queue handlers are idempotent.

`enqueue_first` is saq's enqueue with one difference: the job goes ahead of every job that is
queued and was not enqueued that way (after those that were, in their order). A run woken from a
durable sleep or a wait is owed its slot now; behind a backlog of runs that have not started,
its timer would fire late by the whole backlog.
"""

from __future__ import annotations

import asyncio
import logging
from contextvars import ContextVar
from typing import Any

from redis.asyncio import Redis
from saq.job import Job, Status
from saq.queue.redis import RedisQueue
from saq.utils import now

log = logging.getLogger(__name__)

RUNS_QUEUE = "outlive-runs"
JOBS_QUEUE = "outlive-jobs"
FINISHED_TTL_S = 3600  # how long a job swept out of attempts is kept, when it has no ttl of its own
FIRST_SCAN = 10_000  # how far into the queued list the last job enqueued first is looked for

_first: ContextVar[bool] = ContextVar("outlive_enqueue_first", default=False)


class OutliveRedisQueue(RedisQueue):
    settle_s = 2.0
    _repair_script: Any = None
    _drop_script: Any = None
    _first_script: Any = None

    async def enqueue_first(self, function: str, **kwargs: Any) -> Job | None:
        """saq's `enqueue` (a no-op while a job with that key is queued, scheduled or running),
        but an immediate job goes ahead of the jobs queued by `enqueue`, after those queued by
        `enqueue_first` (see the module's docstring)."""
        token = _first.set(True)
        try:
            return await self.enqueue(function, **kwargs)
        finally:
            _first.reset(token)

    async def _enqueue(self, job: Job) -> Job | None:
        if not _first.get() or job.scheduled:
            return await super()._enqueue(job)
        if not self._first_script:
            self._first_script = self.redis.register_script(_ENQUEUE_FIRST)
        async with self._op_sem:
            done = await self._first_script(
                keys=[
                    self._incomplete,
                    job.id,
                    self._queued,
                    job.abort_id,
                    self.namespace("last-first"),
                ],
                args=[self.serialize(job), FIRST_SCAN],
                client=self.redis,
            )
        return job if done else None

    async def sweep(self, lock: int = 60, abort: float = 5.0) -> list[str]:
        if not self._cleanup_script:
            self._cleanup_script = self.redis.register_script(_ACTIVE_JOBS_UNDER_LOCK)
        id_jobs: list[tuple[bytes, bytes | None]] = await self._cleanup_script(
            keys=[self._sweep, self._active], args=[lock], client=self.redis
        )
        suspects: list[tuple[bytes, bytes]] = []
        swept: list[str] = []
        for job_id, job_bytes in id_jobs:
            job = self.deserialize(job_bytes)
            if job_bytes is None or job is None:
                if await self._drop_missing(job_id):
                    swept.append(job_id.decode())
            elif job.status != Status.ACTIVE:
                suspects.append((job_id, job_bytes))
            elif job.stuck and await self.repair(job_id, job_bytes):
                swept.append(job_id.decode())
        if suspects:
            await asyncio.sleep(self.settle_s)
            for job_id, job_bytes in suspects:
                if await self.repair(job_id, job_bytes):
                    swept.append(job_id.decode())
        return swept

    async def repair(self, job_id: bytes, seen: bytes) -> bool:
        """Re-deliver a job whose worker is gone, in one atomic step, if its record is still
        `seen`: re-queued when it has attempts left, else finished ABORTED. A record that is
        terminal already only loses its stale entry in the active list."""
        job = self.deserialize(seen)
        assert job is not None  # noqa: S101 (the caller read a record)
        error = self.swept_error_message
        if job.status in _TERMINAL:
            mode, ttl = "drop", 0
        elif job.retryable:
            mode, ttl = "queue", 0
            job.status, job.error, job.completed, job.started = Status.QUEUED, error, 0, 0
            job.touched = now()
        else:
            mode, ttl = "finish", job.ttl if job.ttl > 0 else FINISHED_TTL_S
            job.status, job.error, job.completed = Status.ABORTED, error, now()
        if not self._repair_script:
            self._repair_script = self.redis.register_script(_REPAIR)
        done = await self._repair_script(
            keys=[job_id, self._active, self._queued, self._incomplete],
            args=[seen, self.serialize(job), mode, ttl, job.status],
            client=self.redis,
        )
        if done:
            log.info("swept %s (%s): its worker is gone", job.key, mode)
        return bool(done)

    async def _drop_missing(self, job_id: bytes) -> bool:
        if not self._drop_script:
            self._drop_script = self.redis.register_script(_DROP_MISSING)
        return bool(
            await self._drop_script(
                keys=[job_id, self._active, self._incomplete], client=self.redis
            )
        )


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

# KEYS: job id, active, queued, incomplete. ARGV: the record the sweeper read, the new record,
# 'queue' | 'finish' | 'drop', the ttl of a finished record, the status to announce.
_REPAIR = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
if redis.call('LREM', KEYS[2], 0, KEYS[1]) == 0 then return 0 end
if ARGV[3] == 'queue' then
    redis.call('SET', KEYS[1], ARGV[2])
    redis.call('LREM', KEYS[3], 0, KEYS[1])
    redis.call('ZADD', KEYS[4], 0, KEYS[1])
    redis.call('RPUSH', KEYS[3], KEYS[1])
elseif ARGV[3] == 'finish' then
    redis.call('ZREM', KEYS[4], KEYS[1])
    redis.call('SET', KEYS[1], ARGV[2], 'EX', ARGV[4])
end
redis.call('PUBLISH', KEYS[1], ARGV[5])
return 1
"""

# KEYS: incomplete, job id, queued, abort id, the id of the last job enqueued first. ARGV: the
# record, how far to look for that last one. saq's enqueue script, except where the job goes:
# right after the last job enqueued first while it still waits near the head, else at the head.
_ENQUEUE_FIRST = """
if redis.call('ZSCORE', KEYS[1], KEYS[2]) or redis.call('EXISTS', KEYS[4]) == 1 then
    return nil
end
redis.call('SET', KEYS[2], ARGV[1])
redis.call('ZADD', KEYS[1], 0, KEYS[2])
local last = redis.call('GET', KEYS[5])
local at = false
if last then at = redis.call('LPOS', KEYS[3], last, 'MAXLEN', ARGV[2]) end
if at then
    redis.call('LINSERT', KEYS[3], 'AFTER', last, KEYS[2])
else
    redis.call('LPUSH', KEYS[3], KEYS[2])
end
redis.call('SET', KEYS[5], KEYS[2])
return 1
"""

# KEYS: job id, active, incomplete. A job id in the active list whose record is gone.
_DROP_MISSING = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
redis.call('LREM', KEYS[2], 0, KEYS[1])
redis.call('ZREM', KEYS[3], KEYS[1])
return 1
"""


def create_redis(url: str, **kwargs: Any) -> Redis:
    return Redis.from_url(url, socket_connect_timeout=3, health_check_interval=30, **kwargs)


def create_queue(redis_url: str, name: str, *, max_connections: int | None = None) -> RedisQueue:
    redis = create_redis(redis_url, max_connections=max_connections)
    return OutliveRedisQueue(redis, name=name, max_concurrent_ops=50)
