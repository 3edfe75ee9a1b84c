"""The claim and the requeue: the two writes a workflow makes besides settling.

The claim is one conditional update: RUNNING, attempt + 1, only where the status is still QUEUED
or RUNNING, returning the row (and appending the `claimed` event in the same statement). A retried
step re-claims instead of fighting a lock, and a settled row is never claimed again.
"""

from __future__ import annotations

from typing import Any

from sqlalchemy import func

from outlive.db.models import Run, RunStatus
from outlive.db.tx import UnitOfWork
from outlive.ids import RunId
from outlive.services.runs import RunRecord, is_active_predicate, move_run

MAX_ATTEMPTS = 3  # execute has two retries


async def claim_run(uow: UnitOfWork, run_id: RunId) -> RunRecord | None:
    """Take the run for a new attempt; None means it was cancelled or settled before this one."""
    moved = await move_run(
        uow,
        {
            "status": RunStatus.RUNNING.value,
            "attempt": Run.attempt + 1,
            "started_at": func.coalesce(Run.started_at, func.now()),
        },
        [Run.id == run_id, is_active_predicate()],
        "claimed",
        {},
        with_attempt=True,
    )
    if moved is None:
        return None
    run = moved[0]
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
    values: dict[str, Any] = {"status": RunStatus.QUEUED.value}
    if give_back_attempt:
        values["attempt"] = Run.attempt - 1
    moved = await move_run(
        uow,
        values,
        [Run.id == run.id, Run.status == RunStatus.RUNNING.value, Run.attempt == run.attempt],
        event,
        {"attempt": run.attempt, **data},
    )
    return None if moved is None else moved[0]
