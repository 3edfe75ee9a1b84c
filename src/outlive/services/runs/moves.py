"""Moving a run: the claim, heartbeats, timeline events, requeues and settles.

The row is the claim, and the claim's lease lives in the row. A claim takes a run only when it is
QUEUED (and admitted), or RUNNING with an expired lease (`lease_expires_at`), or RUNNING held
by a worker process that is gone (`worker_id`, whose liveness lock is free: `outlive.db.liveness`):
the attempt that holds a run extends its lease with every heartbeat and every timeline event, and
its process holds its liveness lock, so a second delivery of the same run cannot claim it while
the first is alive, whatever the queue does. Taking over an
expired lease counts a lost attempt (`lost_attempts`) and writes a `lost` event before the
`claimed` one. A retried step re-claims instead of fighting a lock, a settled row is never
claimed again, and a live attempt is never claimed from under itself.

Every write here is one statement of `queries` carrying the active-status predicate, and the
writes of one attempt carry its `attempt` (the fencing token): a superseded attempt finds nothing
to update, and gets None back.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from outlive.db.models import RunStatus
from outlive.db.tx import Limits, Unit
from outlive.errors import NotFound
from outlive.ids import RunId, TenantId
from outlive.services import webhooks
from outlive.services.runs import queries
from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.cascade import cancel_descendants
from outlive.services.runs.queries import Move
from outlive.services.runs.reads import read_run
from outlive.services.runs.records import SETTLED_STATUSES, RunRecord, as_json, to_record
from outlive.telemetry import logs, metrics

MAX_ATTEMPTS = 3  # execute has two retries
MAX_LOST_ATTEMPTS = 3  # a run whose worker dies this many times fails: it may be what kills it


async def move_run(uow: Unit, move: Move, **params: Any) -> RunRecord | None:
    """Execute `move` for `params["run_id"]`; the moved run, or None when the predicate matched
    nothing. Nudges `run.event` (and `run.updated` when the move changes the run)."""
    row = await uow.one(move.statement, **params)
    if row is None:
        return None
    return _announce(uow, row, changes_run=move.changes_run, may_settle=move.may_settle)


def _announce(
    uow: Unit, row: Mapping[str, Any], *, changes_run: bool, may_settle: bool
) -> RunRecord:
    run = to_record(row)
    logs.bind(tenant_id=run.tenant_id, run_id=run.id, agent=run.agent)
    if run.status in SETTLED_STATUSES:
        metrics.RUNS_SETTLED.labels(run.agent, run.status.value).inc()
    if changes_run:
        uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
    uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    if may_settle:
        webhooks.announce_deliveries(uow, run.tenant_id, row["delivery_ids"] or ())
        _announce_to_family(uow, run, live_children=bool(row["live_children"]))
        if not run.is_active and (
            _held_a_capped_slot(run, uow.limits, row) or run.key != "" or row["may_admit"]
        ):  # it held one of its tenant's slots, or its key's next run may now start
            dispatch_after_commit(uow, run.tenant_id)
    return run


def _announce_to_family(uow: Unit, run: RunRecord, *, live_children: bool) -> None:
    """A child that settled changed its parent (`children`, and maybe woke it: the trigger
    `outlive_child_settled` did that in the same transaction, leaving it to be admitted by the
    dispatch that every settle of a run with a key makes). A run that settled, or was asked to
    stop, with live children cancels them after the commit."""
    if run.parent_id is not None and not run.is_active:
        uow.nudge("run.updated", run.parent_id, tenant_id=run.tenant_id)
        uow.nudge("run.event", run.parent_id, tenant_id=run.tenant_id)
    if live_children and (not run.is_active or run.cancel_requested_at is not None):
        sessions, tenant_id, run_id = uow.sessions, run.tenant_id, run.id

        async def cascade() -> None:
            await cancel_descendants(sessions, tenant_id, run_id)

        uow.after_commit(cascade)


def _held_a_capped_slot(run: RunRecord, limits: Limits, row: Mapping[str, Any]) -> bool:
    """It held one of its tenant's slots, and the tenant is capped: the next waiting run may have
    it. (A run with a key of its own, or one that leaves a run waiting, always dispatches.)"""
    return run.dispatched_at is not None and limits.runs_capped(row["tenant_max_running"])


async def claim_run(
    uow: Unit,
    run_id: RunId,
    *,
    lease_s: float,
    worker_id: int | None = None,
    versions: str = "{}",
) -> RunRecord | None:
    """Take the run for a new attempt holding a lease of `lease_s`, on behalf of the worker
    process whose liveness key is `worker_id` (None: the lease alone decides); None means it
    was cancelled or settled before this one, or another attempt holds it under a live lease
    and its process is alive. The unit's tenant becomes the run's. `versions`: the code version
    of each agent this worker serves (a JSON object by name), recorded on a run's first claim."""
    row = await uow.one(
        queries.CLAIM, run_id=run_id, lease=lease_s, worker_id=worker_id, versions=versions
    )
    if row is None:
        return None
    run = _announce(uow, row, changes_run=True, may_settle=False)
    uow.tenant_id = run.tenant_id
    return run


@dataclass(frozen=True, slots=True)
class Beat:
    """What a heartbeat found: the attempt still holds the run; whether a cancel was asked."""

    cancel_requested: bool


async def heartbeat(uow: Unit, run_id: RunId, *, attempt: int, lease_s: float) -> Beat | None:
    """Extend `attempt`'s lease; None when it no longer holds the run (settled or taken over)."""
    row = await uow.one(queries.HEARTBEAT, run_id=run_id, attempt=attempt, lease=lease_s)
    return None if row is None else Beat(cancel_requested=row["cancel_requested_at"] is not None)


async def settle_run(
    uow: Unit,
    run_id: RunId,
    status: RunStatus,
    *,
    output: Any = None,
    error: str | None = None,
    attempt: int | None = None,
    stale_before_s: float | None = None,
    lost_before_s: float | None = None,
    event_data: Mapping[str, Any] | None = None,
) -> RunRecord | None:
    """The terminal write. Returns None when the predicate found nothing to settle.

    `attempt` fences the write on that attempt (and its SUCCEEDED becomes CANCELLED when a
    cancel was requested before it: a cancel wins over a success it did not interrupt);
    `stale_before_s` only settles a row that has not
    been updated for that long and holds no live lease (reconcile: a lost instance);
    `lost_before_s` (with `attempt`) only settles a RUNNING run whose lease expired that long ago
    (reconcile: a lost worker)."""
    if status not in SETTLED_STATUSES:
        raise ValueError(f"{status} is not a settled status")
    data = dict(event_data or {})
    if error is not None:
        data.setdefault("error", error)
    params: dict[str, Any] = {
        "run_id": run_id,
        "status": status.value,
        "output": as_json(output),
        "error": error,
        "data": json.dumps(data),
    }
    move = queries.SETTLE
    if attempt is not None and lost_before_s is not None:
        move, params["attempt"], params["grace"] = queries.SETTLE_LOST, attempt, lost_before_s
    elif attempt is not None:
        settle = queries.SETTLE_SUCCESS if status == RunStatus.SUCCEEDED else queries.SETTLE_ATTEMPT
        move, params["attempt"] = settle, attempt
    elif stale_before_s is not None:
        move, params["grace"] = queries.SETTLE_STALE, stale_before_s
    return await move_run(uow, move, **params)


async def requeue_lost(uow: Unit, run: RunRecord, *, grace_s: float) -> RunRecord | None:
    """A RUNNING run whose lease expired more than `grace_s` ago: its worker was lost and nothing
    re-delivered it. Back to QUEUED with a `lost` event, the attempt counted as lost; None when
    the run moved meanwhile."""
    return await move_run(
        uow,
        queries.LOST,
        run_id=run.id,
        attempt=run.attempt,
        grace=grace_s,
        data=json.dumps({"attempt": run.attempt, "reason": "its lease expired; re-enqueued"}),
    )


async def requeue_run(
    uow: Unit,
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
        queries.RELEASE if give_back_attempt else queries.REQUEUE,
        run_id=run.id,
        attempt=run.attempt,
        type=event,
        data=json.dumps({"attempt": run.attempt, **data}),
    )


async def cancel_run(
    uow: Unit, run_id: RunId, *, by: str | None = None, reason: str | None = None
) -> RunRecord:
    """QUEUED settles CANCELLED at once; RUNNING gets `cancel_requested_at`. Idempotent. `by`
    and `reason` go on its `cancelled` or `cancel_requested` event (who asked, and why)."""
    tenant_id = TenantId(uow.require_tenant())
    run = await move_run(
        uow, queries.CANCEL, run_id=run_id, tenant_id=tenant_id, by=by, reason=reason
    )
    if run is not None:
        return run
    current = await read_run(uow, tenant_id, run_id)
    if current is None:
        raise NotFound(f"run {run_id} not found")
    return current


async def append_event(
    uow: Unit,
    run_id: RunId,
    type: str,
    data: Mapping[str, Any],
    *,
    attempt: int,
    lease_s: float,
) -> RunRecord | None:
    """Append to an active run's timeline on behalf of `attempt`, extending its lease: the run as
    it is now (its `event_seq` is the new event's seq), or None when `attempt` no longer holds
    the run."""
    return await move_run(
        uow,
        queries.APPEND,
        run_id=run_id,
        attempt=attempt,
        lease=lease_s,
        type=type,
        data=json.dumps(dict(data)),
    )
