"""Reconcile on read: a run whose workflow instance vanished is settled when someone looks.

There is no sweeper cron: the only rows anybody cares about are the ones somebody reads. A read of
QUEUED or RUNNING rows whose last update is older than `OUTLIVE_RECONCILE_GRACE_S` asks the engine
about their instances; a missing instance, or a finished one under a row that is still active,
settles the row FAILED with an error naming the lost instance. The grace is also part of the
settle's predicate, so a row that a worker touched meanwhile is left alone.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.services.ports import InstanceState, RunInstances
from outlive.services.runs import RunRecord, settle_run


async def reconcile_runs(
    sessions: Sessions,
    instances: RunInstances,
    runs: list[RunRecord],
    *,
    grace_s: float,
) -> list[RunRecord]:
    """The same runs, with every lost one settled; unchanged when nothing is stale."""
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    stale = [r for r in runs if r.is_active and r.updated_at < cutoff]
    if not stale:
        return runs
    states = await instances.states([r.id for r in stale])
    settled: dict[object, RunRecord] = {}
    for run, state in zip(stale, states, strict=True):
        if state is InstanceState.ACTIVE:
            continue
        error = (
            f"workflow instance {run.id} lost: the engine has no record of it"
            if state is InstanceState.MISSING
            else f"workflow instance {run.id} lost: it finished without settling the run"
        )
        async with sessions.unit(run.tenant_id) as uow:
            done = await settle_run(
                uow,
                run.id,
                RunStatus.FAILED,
                error=error,
                stale_before_s=grace_s,
            )
        if done is not None:
            settled[run.id] = done
    return [settled.get(r.id, r) for r in runs]
