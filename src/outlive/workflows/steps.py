"""The claim and the requeue: the two writes a workflow makes besides settling.

The claim is one conditional update: RUNNING, attempt + 1, only where the status is still QUEUED
or RUNNING, returning the row (and appending the `claimed` event in the same statement). A retried
step re-claims instead of fighting a lock, and a settled row is never claimed again.
"""

from __future__ import annotations

import json
from typing import Any

from outlive.db.tx import UnitOfWork
from outlive.ids import RunId
from outlive.services.runs import CLAIM, RELEASE, REQUEUE, RunRecord, move_run

MAX_ATTEMPTS = 3  # execute has two retries


async def claim_run(uow: UnitOfWork, run_id: RunId) -> RunRecord | None:
    """Take the run for a new attempt; None means it was cancelled or settled before this one."""
    run = await move_run(uow, CLAIM, run_id=run_id)
    if run is not None:
        uow.tenant_id = run.tenant_id
    return run


async def requeue_run(
    uow: UnitOfWork,
    run: RunRecord,
    *,
    event: str,
    data: dict[str, Any],
    give_back_attempt: bool = False,
) -> RunRecord | None:
    """RUNNING → QUEUED for this attempt: a scheduled retry, or a release at a graceful stop.

    While QUEUED a cancel settles the run at once. `give_back_attempt` undoes this attempt's
    count (a worker that is shutting down did not use up one of the run's retries).
    """
    return await move_run(
        uow,
        RELEASE if give_back_attempt else REQUEUE,
        run_id=run.id,
        attempt=run.attempt,
        type=event,
        data=json.dumps({"attempt": run.attempt, **data}),
    )
