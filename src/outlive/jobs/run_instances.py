"""Run workflow instances on saq: the instance id is the run id (the saq job key).

Every saq option is set on purpose; saq's defaults (a 10 s timeout, one attempt) are wrong here:

- `retries = MAX_ATTEMPTS` (3): saq counts attempts, not retries. The row's own `attempt` is the
  authority (see `outlive.workflows.runs`); saq's count only has to allow a crashed attempt to be
  delivered again.
- `timeout = OUTLIVE_RUN_TIMEOUT_S + 120`: the workflow enforces the execute timeout itself and
  settles or retries; saq's timeout is only the last line behind it.
- `heartbeat = OUTLIVE_RUN_HEARTBEAT_S` (10 s): an executing attempt touches its job every third
  of that; the sweep (every `OUTLIVE_RUN_SWEEP_S`, 5 s) re-delivers a job whose worker stopped
  touching it, so a SIGKILLed worker's run is re-claimed within about 20 s, not after the timeout.
- `retry_delay`: set per retry by the workflow (`RetryLater`), exact; `retry_backoff` stays off
  because saq would add full jitter.
- `ttl = 3600`: how long saq keeps a *finished* job. A queued, scheduled or active job has no
  expiry in saq's Redis queue, so a live run's instance never vanishes by ttl; a finished one only
  matters to reconcile, which treats "finished" and "missing" alike.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any
from uuid import UUID

from redis.exceptions import RedisError
from saq.job import TERMINAL_STATUSES
from saq.queue import Queue

from outlive.config import Settings
from outlive.errors import QueueUnavailable
from outlive.ids import RunId
from outlive.services.ports import InstanceState
from outlive.workflows.runs import RetryLater, WorkflowDeps, run_attempt
from outlive.workflows.steps import MAX_ATTEMPTS

log = logging.getLogger(__name__)

RUN_TASK = "run_workflow"
FINISHED_TTL_S = 3600
TIMEOUT_MARGIN_S = 120


class SaqRunInstances:
    def __init__(self, queue: Queue, settings: Settings) -> None:
        self.queue = queue
        self._options: dict[str, Any] = {
            "retries": MAX_ATTEMPTS,
            "timeout": int(settings.run_timeout_s + TIMEOUT_MARGIN_S),
            "heartbeat": max(1, int(settings.run_heartbeat_s)),
            "ttl": FINISHED_TTL_S,
            "retry_delay": 0.0,
            "retry_backoff": False,
        }

    async def start(self, run_id: RunId) -> None:
        try:
            await self.queue.enqueue(RUN_TASK, key=str(run_id), run_id=str(run_id), **self._options)
        except (RedisError, OSError) as exc:
            raise QueueUnavailable(f"the run queue is unreachable: {exc}") from exc

    async def states(self, run_ids: Sequence[RunId]) -> list[InstanceState]:
        try:
            jobs = await self.queue.jobs(str(r) for r in run_ids)
        except (RedisError, OSError):
            log.warning("cannot reach the run queue to reconcile; leaving rows as they are")
            return [InstanceState.ACTIVE] * len(run_ids)
        return [
            InstanceState.MISSING
            if job is None
            else InstanceState.FINISHED
            if job.status in TERMINAL_STATUSES
            else InstanceState.ACTIVE
            for job in jobs
        ]


class SaqAttemptControl:
    def __init__(self, ctx: dict[str, Any]) -> None:
        self._job = ctx["job"]
        self._worker = ctx["worker"]

    async def heartbeat(self) -> None:
        await self._job.update()

    def is_shutting_down(self) -> bool:
        return bool(self._worker.event.is_set())

    def give_back_attempt(self) -> None:
        self._job.attempts = max(0, self._job.attempts - 1)
        self._job.retry_delay = 0.0


async def run_workflow(ctx: dict[str, Any], *, run_id: str) -> None:
    """The saq task: one delivery of a run's instance is one attempt."""
    deps: WorkflowDeps = ctx["outlive_workflows"]
    try:
        await run_attempt(deps, RunId(UUID(run_id)), SaqAttemptControl(ctx))
    except RetryLater as later:
        ctx["job"].retry_delay = later.delay_s
        raise
