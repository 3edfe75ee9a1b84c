"""Run workflow instances on saq: the instance id is the run id (the saq job key).

Every saq option is set on purpose; saq's defaults (a 10 s timeout, one attempt) are wrong here:

- `retries = DELIVERIES` (20): saq counts attempts, not retries. The row is the authority: its
  `attempt`, `lost_attempts` and lease decide what a delivery may do (see
  `outlive.workflows.runs`). saq's count only has to let a crashed attempt be delivered again,
  and to end a job whose every delivery dies before it can claim; a delivery that finds another
  attempt holding the run (`RetryLater(counts=False)`) gives its saq attempt back.
- `timeout = OUTLIVE_RUN_TIMEOUT_S + 120`: the workflow enforces the execute timeout itself and
  settles or retries; saq's timeout is only the last line behind it.
- `heartbeat = OUTLIVE_RUN_HEARTBEAT_S` (10 s): an executing attempt touches its job (and extends
  its row's lease) every third of that; the sweep (every `OUTLIVE_RUN_SWEEP_S`, 5 s) re-delivers a
  job whose worker stopped touching it, and the new delivery takes over the run once the row's
  lease has expired. That is the path of a frozen or partitioned worker; a worker process that
  died is seen sooner: its liveness lock is free in PostgreSQL, and the relay re-delivers its
  runs' jobs at once (`redeliver`), within about `OUTLIVE_LIVENESS_CHECK_S`.
- `retry_delay`: set per retry by the workflow (`RetryLater`), exact; `retry_backoff` stays off
  because saq would add full jitter.
- `ttl = 3600`: how long saq keeps a *finished* job. A queued, scheduled or active job has no
  expiry in saq's Redis queue, so a live run's instance never vanishes by ttl; a finished one only
  matters to reconcile, which treats "finished" and "missing" alike.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Any
from uuid import UUID

from redis.exceptions import RedisError
from saq.job import Status
from saq.queue.redis import RedisQueue

from outlive.config import Settings
from outlive.db.ports import InstanceState
from outlive.db.tx import Sessions
from outlive.errors import QueueUnavailable, ServiceUnavailable
from outlive.ids import RunId
from outlive.jobs.deps import RunsContext
from outlive.jobs.queues import OutliveRedisQueue
from outlive.services.runs import handed_while_parking
from outlive.workflows.runs import RetryLater, run_attempt

log = logging.getLogger(__name__)

RUN_TASK = "run_workflow"
FINISHED_TTL_S = 3600
TIMEOUT_MARGIN_S = 120
DELIVERIES = 20


class SaqRunInstances:
    def __init__(self, queue: RedisQueue, settings: Settings) -> None:
        self.queue = queue
        self._options: dict[str, Any] = {
            "retries": DELIVERIES,
            "timeout": int(settings.run_timeout_s + TIMEOUT_MARGIN_S),
            "heartbeat": max(1, int(settings.run_heartbeat_s)),
            "ttl": FINISHED_TTL_S,
            "retry_delay": 0.0,
            "retry_backoff": False,
        }
        self._timeout_s = settings.queue_timeout_s  # a hung Redis holds no request longer
        self._due_now: Any = None

    async def start(self, run_id: RunId) -> None:
        """Enqueue the instance; a no-op while one is queued, scheduled or executing (the job key
        is the run id), so a repair can always call it."""
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.queue.enqueue(
                    RUN_TASK, key=str(run_id), run_id=str(run_id), **self._options
                )
        except (RedisError, OSError, TimeoutError) as exc:
            raise QueueUnavailable(f"the run queue is unreachable: {exc!r}") from exc

    async def resume(self, run_id: RunId) -> None:
        """`start` for a run that was woken (a timer, a signal): its job goes ahead of the runs
        that have not started yet (`OutliveRedisQueue.enqueue_first`)."""
        if not isinstance(self.queue, OutliveRedisQueue):
            await self.start(run_id)
            return
        try:
            async with asyncio.timeout(self._timeout_s):
                await self.queue.enqueue_first(
                    RUN_TASK, key=str(run_id), run_id=str(run_id), **self._options
                )
        except (RedisError, OSError, TimeoutError) as exc:
            raise QueueUnavailable(f"the run queue is unreachable: {exc!r}") from exc

    async def states(self, run_ids: Sequence[RunId]) -> list[InstanceState]:
        """ACTIVE: in saq's incomplete set (queued, scheduled or executing). A job outside it
        whose record says otherwise (`aborting`, `active`) is in no list and nothing would ever
        deliver it: FINISHED, like a completed one."""
        parts = [self._partition(r) for r in run_ids]
        try:
            async with self.queue.redis.pipeline(transaction=False) as pipe:
                for run_id, part in zip(run_ids, parts, strict=True):
                    job_id = part.job_id(str(run_id))
                    pipe.zscore(part.namespace("incomplete"), job_id)
                    pipe.exists(job_id)
                replies = await pipe.execute()
        except (RedisError, OSError):
            log.warning("cannot reach the run queue to reconcile; leaving rows as they are")
            return [InstanceState.ACTIVE] * len(run_ids)
        return [
            InstanceState.ACTIVE
            if score is not None
            else InstanceState.FINISHED
            if exists
            else InstanceState.MISSING
            for score, exists in zip(replies[::2], replies[1::2], strict=True)
        ]

    async def redeliver(self, run_ids: Sequence[RunId]) -> int:
        """Deliver these instances again now: their worker process is gone (its liveness lock is
        free in PostgreSQL). A job still active on the dead worker is re-queued by the queue's
        compare-and-set repair (`OutliveRedisQueue.repair`: nothing happens if a live worker
        touched it meanwhile); a job scheduled for later (a delivery waiting for the holder's
        lease) is made due now; a missing or finished one is enqueued again."""
        # All at once, not one after the other: each is two round trips to Redis, and a worker
        # restarted in place (one process, SIGKILLed) hands all of its predecessor's runs here;
        # serially, 18 runs took 2.6 s on a loaded machine (bench/peers.py --only restart).
        handed = 0
        try:
            async with asyncio.timeout(self._timeout_s * 4):
                for at in range(0, len(run_ids), REDELIVER_CHUNK):
                    chunk = run_ids[at : at + REDELIVER_CHUNK]
                    done = await asyncio.gather(
                        *(self._redeliver(self.queue.job_id(str(r)), r) for r in chunk)
                    )
                    handed += sum(done)
        except (RedisError, OSError, TimeoutError) as exc:
            raise QueueUnavailable(f"the run queue is unreachable: {exc!r}") from exc
        return handed

    async def _redeliver(self, job_id: str, run_id: RunId) -> int:
        part = self._partition(run_id)
        seen = await part.redis.get(job_id)
        job = None if seen is None else part.deserialize(seen)
        if seen is None or job is None or job.status in _FINISHED:
            await self.start(run_id)
            return 1
        if job.status == Status.ACTIVE and isinstance(part, OutliveRedisQueue):
            return int(await part.repair(job_id.encode(), seen))
        if self._due_now is None:
            self._due_now = part.redis.register_script(_DUE_NOW)
        keys = [part.namespace("incomplete"), part.namespace("queued")]
        return int(await self._due_now(keys=keys, args=[job_id], client=part.redis))

    def _partition(self, run_id: RunId) -> RedisQueue:
        """The saq queue that holds the run's job (`PartitionedQueue`; else the queue)."""
        if isinstance(self.queue, OutliveRedisQueue):
            return self.queue.partition(str(run_id))
        return self.queue


REDELIVER_CHUNK = 50  # redeliveries in flight at once
_FINISHED = (Status.COMPLETE, Status.FAILED, Status.ABORTED)

# KEYS: incomplete, queued. ARGV: the job id. A job scheduled for later (its score is a time):
# due now, as saq's own schedule script makes it (score 0, pushed to the queued list).
_DUE_NOW = """
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= 1 then return 0 end
redis.call('ZADD', KEYS[1], 0, ARGV[1])
redis.call('RPUSH', KEYS[2], ARGV[1])
return 1
"""


class SaqAttemptControl:
    def __init__(self, ctx: RunsContext) -> None:
        self._ctx = ctx
        self._job = ctx["job"]
        self._worker = ctx["worker"]

    async def heartbeat(self) -> None:
        await self._job.update()

    def is_shutting_down(self) -> bool:
        return bool(self._worker.event.is_set())

    def give_back_attempt(self) -> None:
        self._job.attempts = max(0, self._job.attempts - 1)
        self._job.retry_delay = 0.0

    def parked(self) -> None:
        self._ctx["parked"] = True


def after_parking(
    instances: SaqRunInstances, sessions: Sessions
) -> Callable[[RunsContext], Awaitable[None]]:
    """saq's after-process hook of the runs worker, called once a delivery is over and its job
    key is free again. A run can be woken (a child settled, a signal came) and handed to the
    queue between the commit that parked it and the end of the delivery that parked it; that
    hand-off found the job key still held, and was a no-op (saq enqueues a key once). So after a
    delivery that parked its run, a run found QUEUED and admitted is handed again (a no-op if the
    waker's hand-off did land); otherwise the relay's recheck would find it, seconds later."""

    async def hook(ctx: RunsContext) -> None:
        if not ctx.get("parked"):
            return
        run_id = RunId(UUID((ctx["job"].kwargs or {})["run_id"]))
        try:
            if await handed_while_parking(sessions, run_id):
                await instances.start(run_id)
        except (QueueUnavailable, ServiceUnavailable) as exc:  # the relay hands it later
            log.info("run %s: not handed again after its park (%s)", run_id, exc)

    return hook


async def run_workflow(ctx: RunsContext, *, run_id: str) -> None:
    """The saq task: one delivery of a run's instance is one attempt."""
    deps = ctx["outlive"].workflows
    try:
        await run_attempt(deps, RunId(UUID(run_id)), SaqAttemptControl(ctx))
    except RetryLater as later:
        job = ctx["job"]
        job.retry_delay = later.delay_s
        if not later.counts:  # this delivery did not execute the run
            job.attempts = max(0, job.attempts - 1)
        raise
