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

On a Redis Cluster (`outlive.jobs.redis`) saq runs as it is but for three things this class
changes: a job's abort key (saq's `saq:abort:<key>` has no hash tag, and saq's enqueue script
touches it with the queue's keys: CROSSSLOT) is the queue's own `abort:<key>`; the server version
(a cluster answers INFO once per node) is not asked; and the client closes without the
`connection_pool` a cluster client has none of. Nothing in Outlive aborts a saq job, so the abort
key is only ever checked, never set.

`PartitionedQueue` spreads one queue over P saq queues (one hash tag, so one slot, each): a job
goes to the partition its key hashes to (the run id; the envelope id), so every hand-off of a run
(the API's, the relay's rebuild, a redelivery) finds the same partition, and saq's once-per-key
enqueue holds. A worker consumes all partitions, or those `OUTLIVE_QUEUE_CONSUME` names.
"""

from __future__ import annotations

import asyncio
import logging
import zlib
from collections.abc import Iterable, Sequence
from contextvars import ContextVar
from typing import Any

from saq.job import TERMINAL_STATUSES, Job, Status
from saq.queue.redis import RedisQueue
from saq.types import CountKind, VersionTuple
from saq.utils import now

from outlive.jobs.redis import create_redis, is_cluster, is_cluster_url, queue_names

__all__ = ["create_queue", "create_redis"]

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
    _plain_script: Any = None

    async def enqueue_first(self, function: str, **kwargs: Any) -> Job | None:
        """saq's `enqueue` (a no-op while a job with that key is queued, scheduled or running),
        but an immediate job goes ahead of the jobs queued by `enqueue`, after those queued by
        `enqueue_first` (see the module's docstring)."""
        token = _first.set(True)
        try:
            return await self.enqueue(function, **kwargs)
        finally:
            _first.reset(token)

    @property
    def partitions(self) -> Sequence[OutliveRedisQueue]:
        return (self,)

    def partition(self, key: str) -> OutliveRedisQueue:
        """The saq queue that holds the job keyed `key`: this one (see `PartitionedQueue`)."""
        return self

    @property
    def consumed(self) -> Sequence[OutliveRedisQueue]:
        """The saq queues this process's worker takes jobs from: this one."""
        return (self,)

    def schedule_keys(self) -> list[str]:
        """saq's schedule script's keys: the pass's lock, the incomplete set, the queued list
        (`outlive.jobs.schedule_pass`)."""
        return [self._schedule, self._incomplete, self._queued]

    def abort_key(self, job: Job) -> str:
        return self.namespace(f"abort:{job.key}")

    async def _enqueue(self, job: Job) -> Job | None:
        first = _first.get() and not job.scheduled
        if first and not self._first_script:
            self._first_script = self.redis.register_script(_ENQUEUE_FIRST)
        elif not first and not self._plain_script:
            self._plain_script = self.redis.register_script(_ENQUEUE)
        keys = [self._incomplete, job.id, self._queued, self.abort_key(job)]
        async with self._op_sem:
            if first:
                done = await self._first_script(
                    keys=[*keys, self.namespace("last-first")],
                    args=[self.serialize(job), FIRST_SCAN],
                    client=self.redis,
                )
            else:
                done = await self._plain_script(
                    keys=keys, args=[self.serialize(job), job.scheduled], client=self.redis
                )
        return job if done else None

    async def finish_abort(self, job: Job) -> None:
        await self.redis.delete(self.abort_key(job))
        await job.finish(Status.ABORTED, error=job.error)  # saq's `Queue.finish_abort`

    async def version(self) -> VersionTuple:
        if is_cluster(self.redis):  # INFO answers per node; a cluster is Redis >= 7
            return (7, 0, 0)
        return await super().version()

    async def notify(self, job: Job) -> None:
        """saq publishes each change of a job for `Job.refresh` and `Queue.listen`. Outlive's
        code never listens, and saq's own waits (`refresh(until_complete=...)`, `apply`) wait
        for a terminal status only: so only a job's end is published, not its start or its
        heartbeats (one PUBLISH round trip less for every run and every heartbeat). On a cluster
        a PUBLISH goes to every node, so there none is sent."""
        if job.status in TERMINAL_STATUSES and not is_cluster(self.redis):
            await super().notify(job)

    async def disconnect(self) -> None:
        if not is_cluster(self.redis):
            await super().disconnect()
            return
        await self.close_pubsub()
        await self.redis.aclose()

    async def close_pubsub(self) -> None:
        await self._pubsub.close()
        if is_cluster(self.redis):
            # The cluster client's pubsub is a plain client's of its own (`jobs.redis`): the
            # multiplexer's close leaves the connection its PUNSUBSCRIBE took in that pool.
            await self._pubsub.pubsub.connection_pool.disconnect()

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
        if job.status in TERMINAL_STATUSES:
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

# KEYS: incomplete, job id, queued, abort key. ARGV: the record, when it is due (0: now). saq's.
_ENQUEUE = """
if not redis.call('ZSCORE', KEYS[1], KEYS[2]) and redis.call('EXISTS', KEYS[4]) == 0 then
    redis.call('SET', KEYS[2], ARGV[1])
    redis.call('ZADD', KEYS[1], ARGV[2], KEYS[2])
    if ARGV[2] == '0' then redis.call('RPUSH', KEYS[3], KEYS[2]) end
    return 1
end
return nil
"""

# KEYS: incomplete, job id, queued, abort key, the id of the last job enqueued first. ARGV: the
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


class PartitionedQueue(OutliveRedisQueue):
    """One queue over several saq queues (see the module's docstring). It answers for its first
    partition (whose name it has) where saq's worker asks the queue itself (worker info), and
    routes by job key everything that concerns one job.

    A worker's dequeue loop first looks at the consumed partitions in turn (a non-blocking LMOVE
    each, starting one further on each time: under load the first one has work), then blocks
    on the partition the fewest loops wait on, for `steal_s` at most, and looks again. So each
    partition has a waiting loop as soon as a worker has as many loops as partitions (a job
    pushed to an idle queue is taken at once), and a burst in one partition gets every idle loop
    of the worker within `steal_s`. An idle loop costs P + 1 commands every `steal_s`."""

    steal_s = 2.0

    def __init__(self, parts: Sequence[OutliveRedisQueue], consume: Sequence[int] | None = None):
        first = parts[0]
        super().__init__(first.redis, name=first.name, max_concurrent_ops=MAX_CONCURRENT_OPS)
        self._parts = tuple(parts)
        chosen = consume if consume else range(len(parts))
        self._consumed = tuple(parts[i % len(parts)] for i in chosen)
        self._waiting = [0] * len(self.consumed)  # dequeue loops blocked on each partition
        self._turn = 0  # where the next look for work starts: the partitions in turn

    @property
    def partitions(self) -> Sequence[OutliveRedisQueue]:
        return self._parts

    def partition(self, key: str) -> OutliveRedisQueue:
        return self._parts[zlib.crc32(key.encode()) % len(self._parts)]

    @property
    def consumed(self) -> Sequence[OutliveRedisQueue]:
        return self._consumed

    def job_id(self, job_key: str) -> str:
        return self.partition(job_key).job_id(job_key)

    async def _enqueue(self, job: Job) -> Job | None:
        part = self.partition(job.key)
        job.queue = part  # its record names the partition, which deserializes it
        return await part._enqueue(job)

    async def job(self, job_key: str) -> Job | None:
        return await self.partition(job_key).job(job_key)

    async def jobs(self, job_keys: Iterable[str]) -> list[Job | None]:
        return [await self.job(key) for key in job_keys]

    async def count(self, kind: CountKind) -> int:
        return sum([await part.count(kind) for part in self._parts])

    async def schedule(self, lock: int = 1) -> list[str]:
        done = await asyncio.gather(*(part.schedule(lock) for part in self.consumed))
        return [job_id for ids in done for job_id in ids]

    async def sweep(self, lock: int = 60, abort: float = 5.0) -> list[str]:
        done = await asyncio.gather(*(part.sweep(lock, abort) for part in self.consumed))
        return [job_id for ids in done for job_id in ids]

    async def dequeue(self, timeout: float = 0.0, poll_interval: float = 0.0) -> Job | None:  # noqa: ASYNC109 (saq's signature)
        if len(self.consumed) == 1:
            return await self.consumed[0].dequeue(timeout, poll_interval)
        clock = asyncio.get_running_loop()
        deadline = None if timeout <= 0 else clock.time() + timeout
        while True:
            self._turn += 1
            for at in range(len(self.consumed)):  # work anywhere? (one LMOVE each at most)
                part = self.consumed[(self._turn + at) % len(self.consumed)]
                job_id = await part.redis.lmove(part._queued, part._active, "LEFT", "RIGHT")
                if job_id is not None:
                    return await part._get_job_by_id(job_id)
            wait = self.steal_s if deadline is None else min(self.steal_s, deadline - clock.time())
            if wait <= 0:
                return None
            home = min(range(len(self.consumed)), key=self._waiting.__getitem__)
            self._waiting[home] += 1
            try:
                job = await self.consumed[home].dequeue(wait)
            finally:
                self._waiting[home] -= 1
            if job is not None:
                return job

    async def connect(self) -> None:
        for part in self._parts:
            await part.connect()
        await super().connect()

    async def disconnect(self) -> None:
        for part in self._parts:  # the first's too: this queue's own pub/sub is another one
            await part.close_pubsub()
        await super().disconnect()  # this queue's pub/sub, and the client they all share


MAX_CONCURRENT_OPS = 50
CLUSTER_PARTITIONS = 3  # one per master of three (`outlive.jobs.redis.queue_names`)


def create_queue(
    redis_url: str,
    name: str,
    *,
    partitions: int | None = None,
    consume: Sequence[int] | None = None,
    max_connections: int | None = None,
) -> OutliveRedisQueue:
    """The queue `name` on `redis_url`, spread over `partitions` saq queues (None: 1 on one
    Redis, which is one saq queue as always, and `CLUSTER_PARTITIONS` on a cluster); a worker's
    consumes `consume` (indexes; None: all)."""
    redis = create_redis(redis_url, max_connections=max_connections)
    cluster = is_cluster_url(redis_url)
    count = partitions or (CLUSTER_PARTITIONS if cluster else 1)
    names = queue_names(name, count, cluster=cluster)
    parts = [OutliveRedisQueue(redis, name=n, max_concurrent_ops=MAX_CONCURRENT_OPS) for n in names]
    return parts[0] if len(parts) == 1 else PartitionedQueue(parts, consume)
