"""`cancelRuns`: cancel every active run a filter selects, as a bulk replay replays them.

It is a replay's machinery with another act: a `run_replays` row of kind CANCEL (the filter, the
pace, the count it will take, capped; who asked and why), ticks of `run.replay.v1` that each
cancel at most `rate` runs a second of the tick, oldest first, `replay.updated` nudges, and Stop
(`cancelRunReplay`). Each run goes through `cancelRun`'s own path (`runs.cancel_run`): QUEUED and
WAITING settle CANCELLED at once, RUNNING is asked to stop at its next step, its descendants are
cancelled after the commit, and its timeline says who asked and why. Only runs created before the
bulk cancel are taken, so runs started while it goes on are left alone; a run that settled by
itself before its turn came is skipped and counted.
"""

from __future__ import annotations

from collections.abc import Sequence
from uuid import UUID

from outlive.db.models import ReplayKind, Run, RunReplay, RunStatus
from outlive.db.tx import UnitOfWork
from outlive.errors import BadUserInput
from outlive.ids import RunId
from outlive.services import replays, runs
from outlive.services.bulk_filters import RunsFilter, count_matching

ACTIVE_STATUSES = (RunStatus.QUEUED, RunStatus.RUNNING, RunStatus.WAITING)
DEFAULT_RATE = 50.0  # runs a second: 1,000 runs in 20 s, with time to look and Stop
MAX_RATE = 200.0
REASON_MAX = 500  # as cancelRun's


def cancel_statuses(statuses: Sequence[RunStatus] | None) -> list[RunStatus]:
    """The statuses a bulk cancel takes: active ones only, all of them when none are given."""
    chosen = list(dict.fromkeys(statuses or ACTIVE_STATUSES))
    settled = [s.value for s in chosen if s not in ACTIVE_STATUSES]
    if settled:
        raise BadUserInput(f"only active runs can be cancelled, not {', '.join(settled)}")
    return chosen


def check_reason(reason: str | None) -> str | None:
    if reason is not None and len(reason) > REASON_MAX:
        raise BadUserInput(f"reason is at most {REASON_MAX} characters")
    return reason or None


async def create_cancel(
    uow: UnitOfWork,
    *,
    filter: RunsFilter,
    reason: str | None,
    by: str,
    rate: float,
    limit: int,
    max_runs: int,
) -> replays.ReplayRecord:
    """The bulk cancel's row and its first tick (after the commit); the cancels happen in jobs."""
    replays.check_pace(rate, limit, max_rate=MAX_RATE, max_runs=max_runs)
    values = {"rate": rate, "reason": check_reason(reason), "requested_by": by}
    return await replays.create_bulk(uow, ReplayKind.CANCEL, filter, values, limit=limit)


async def count_cancel(uow: UnitOfWork, *, filter: RunsFilter, limit: int, max_runs: int) -> int:
    """How many runs `cancelRuns` with these arguments would take now: the count to show first."""
    replays.check_pace(1.0, limit, max_rate=1.0, max_runs=max_runs)
    return await count_matching(
        uow.session, uow.require_tenant(), filter, ReplayKind.CANCEL, limit=limit
    )


async def advance_cancel(
    uow: UnitOfWork, replay_id: UUID, tick: int
) -> replays.ReplayRecord | None:
    """One tick of a bulk cancel; None when there was nothing to do."""
    row = await replays.lock_row(uow, replay_id)
    if row is None or row.kind != ReplayKind.CANCEL.value:
        return None
    return await replays.advance(uow, row, tick, lambda batch: _cancel_batch(uow, row, batch))


async def _cancel_batch(uow: UnitOfWork, row: RunReplay, batch: Sequence[Run]) -> None:
    for run in batch:
        moved = await runs.cancel_run(uow, RunId(run.id), by=row.requested_by, reason=row.reason)
        if moved.status == RunStatus.CANCELLED or moved.cancel_requested_at is not None:
            row.cancelled += 1
        else:  # it settled by itself since it was counted
            row.skipped += 1
        row.cursor_created_at, row.cursor_id = run.created_at, run.id
