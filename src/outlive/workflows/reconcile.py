"""Reconcile on read: a run whose work was lost is repaired when someone looks.

There is no sweeper cron: the only rows anybody cares about are the ones somebody reads. Every
read of runs (`run`, `runs`) passes the active ones it returns through `reconcile_runs`, which
acts only on rows older than `OUTLIVE_RECONCILE_GRACE_S`, and repeats each check in the
predicate of the write it makes, so a row a worker touched meanwhile is left alone:

- **a lost worker**: a RUNNING run whose lease expired more than the grace ago, whatever the
  engine says about its instance (a job left `aborting` or `active` by a dead worker looks alive
  there). The run is re-enqueued (a no-op when an instance is already queued or scheduled) and
  set back to QUEUED with a `lost` event, the attempt counted as lost; a run whose cancel was
  requested settles CANCELLED instead, and one that has lost its worker `MAX_LOST_ATTEMPTS`
  times without completing a step in those attempts settles FAILED, saying so.
- **a lost instance** (contract §7): a QUEUED run (or a RUNNING one with no live lease) whose
  instance the engine no longer has, or has finished while the row is still active, is handed
  to the queue again (the row is the truth, the queue only a copy: Redis restarted empty,
  flushed or failed over), and runs; it is never failed for it. The relay in every worker
  (`services.relay`) does the same without a read. A run still waiting for a slot under its
  tenant's cap has no instance yet, by design: it is not lost, and its tenant's waiting runs are
  dispatched instead (should a dispatch have been missed, a read makes up for it). A run
  queued behind another run of its key has no instance either: the settle of the run ahead
  moves it up (in the settle's own transaction), and its dispatch admits it. A WAITING
  run has no instance either: its timer lives in PostgreSQL and the relay wakes it.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime, timedelta

from outlive.db.models import RunStatus
from outlive.db.ports import Admission, InstanceState, RunInstances
from outlive.db.tx import Sessions
from outlive.errors import QueueUnavailable
from outlive.services import runs
from outlive.services.runs import (
    MAX_LOST_ATTEMPTS,
    RunRecord,
    barren_losses,
    requeue_lost,
    settle_run,
)

log = logging.getLogger(__name__)


async def reconcile_runs(
    sessions: Sessions,
    instances: RunInstances,
    runs: list[RunRecord],
    *,
    admission: Admission,
    grace_s: float,
) -> list[RunRecord]:
    """The same runs, with every lost one repaired; unchanged when nothing is stale."""
    cutoff = datetime.now(UTC) - timedelta(seconds=grace_s)
    lost_workers = [r for r in runs if _worker_lost_before(r, cutoff)]
    stale = [
        r
        for r in runs
        if r.status in (RunStatus.QUEUED, RunStatus.RUNNING)  # WAITING has no instance, by design
        and r.updated_at < cutoff
        and r not in lost_workers
        and (r.status == RunStatus.QUEUED or r.lease_expires_at is None)
    ]
    waiting = {r.tenant_id for r in stale if r.is_waiting}
    # Waiting for a slot, or for its turn in its key's line: no instance yet, by design.
    stale = [r for r in stale if not (r.is_waiting or r.is_behind)]
    for tenant_id in waiting:  # a dispatch that nobody triggered: admit what has a slot now
        await admission.dispatch_runs(tenant_id)
    if not (lost_workers or stale):
        return runs
    repaired: dict[object, RunRecord] = {}
    for run in lost_workers:
        done = await _recover_lost_worker(sessions, instances, run, grace_s=grace_s)
        if done is not None:
            repaired[run.id] = done
    if stale:
        states = await instances.states([r.id for r in stale])
        for run, state in zip(stale, states, strict=True):
            if state is not InstanceState.ACTIVE:
                await _hand_again(sessions, instances, run, state)
    return [repaired.get(r.id, r) for r in runs]


def _worker_lost_before(run: RunRecord, cutoff: datetime) -> bool:
    return (
        run.status == RunStatus.RUNNING
        and run.lease_expires_at is not None
        and run.lease_expires_at < cutoff
    )


async def _recover_lost_worker(
    sessions: Sessions, instances: RunInstances, run: RunRecord, *, grace_s: float
) -> RunRecord | None:
    # Only the lost attempts that completed no step count (cheap test first: all of them).
    lost = run.lost_attempts + 1
    if lost >= MAX_LOST_ATTEMPTS:
        lost = await barren_losses(sessions, run.id, losing=run.attempt)
    if run.cancel_requested_at is not None or lost >= MAX_LOST_ATTEMPTS:
        cancelled = run.cancel_requested_at is not None
        async with sessions.unit(run.tenant_id) as uow:
            return await settle_run(
                uow,
                run.id,
                RunStatus.CANCELLED if cancelled else RunStatus.FAILED,
                error=None if cancelled else _gave_up(run, lost),
                attempt=run.attempt,
                lost_before_s=grace_s,
            )
    # The instance first: should the row's move fail, the delivery still takes the run over.
    try:
        await instances.start(run.id)
    except QueueUnavailable:
        log.warning("run %s: its worker was lost, but the queue is unreachable", run.id)
        return None
    async with sessions.unit(run.tenant_id) as uow:
        return await requeue_lost(uow, run, grace_s=grace_s)


def _gave_up(run: RunRecord, lost: int) -> str:
    return (
        f"gave up: its worker was lost {lost} times without completing a step (attempt "
        f"{run.attempt}'s lease expired and "
        "nothing took it over); a run that kills its worker is not retried forever"
    )


async def _hand_again(
    sessions: Sessions, instances: RunInstances, run: RunRecord, state: InstanceState
) -> None:
    """Rebuild a lost instance: enqueue the run again (a no-op should one have appeared since);
    an unreachable queue leaves the run to the relay."""
    log.warning("run %s: its instance is %s; handing it to the queue again", run.id, state.value)
    try:
        await instances.start(run.id)
    except QueueUnavailable:
        await runs.handoff_failed_runs(sessions, [run.id])
