"""The claim and the requeue: the two writes a workflow makes besides settling.

The claim is one conditional update: RUNNING, attempt + 1, a fresh lease, only where the status
is still QUEUED, or RUNNING with an expired lease (the attempt holding it lost its worker),
returning the row (and appending the `claimed` event, after a `lost` one for a take-over, in the
same statement). A retried step re-claims instead of fighting a lock, a settled row is never
claimed again, and a live attempt is never claimed from under itself.
"""

from __future__ import annotations

import json
from typing import Any

from outlive.db.tx import UnitOfWork
from outlive.ids import RunId
from outlive.services.runs import RELEASE, REQUEUE, RunRecord, claim, move_run

MAX_ATTEMPTS = 3  # execute has two retries
MAX_LOST_ATTEMPTS = 3  # a run whose worker dies this many times fails: it may be what kills it


async def claim_run(uow: UnitOfWork, run_id: RunId, *, lease_s: float) -> RunRecord | None:
    """Take the run for a new attempt holding a lease of `lease_s`; None means it was cancelled
    or settled before this one, or another attempt holds it under a live lease."""
    run = await claim(uow, run_id, lease_s=lease_s)
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
