"""Run replays and bulk cancels: `RunReplay` (either, by `kind`), its status, and the filters of
`replayRuns` and `cancelRuns` (the runs list's filters)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime

import strawberry

from outlive.db.models import ReplayKind as DbReplayKind
from outlive.db.models import ReplayStatus as DbReplayStatus
from outlive.db.models import RunStatus as DbRunStatus
from outlive.schema.runs import RunStatus
from outlive.services.bulk_filters import RunsFilter, runs_filter
from outlive.services.replays import ReplayRecord

ReplayStatus = strawberry.enum(DbReplayStatus, name="ReplayStatus")
# Which statuses a bulk operation takes, from those asked (services.replays.replay_statuses,
# services.bulk_cancels.cancel_statuses).
Statuses = Callable[[Sequence[DbRunStatus] | None], list[DbRunStatus]]
RunReplayKind = strawberry.enum(
    DbReplayKind,
    name="RunReplayKind",
    description="REPLAY: replayRuns starts settled runs again; CANCEL: cancelRuns cancels active "
    "runs.",
)


@strawberry.input(description="The runs list's filters, as a bulk replay or cancel takes them.")
class BulkRunsFilter:
    status: list[RunStatus] | None = None  # type: ignore[valid-type]
    agent: str | None = None
    since: datetime | None = strawberry.field(default=None, description="createdAt >= since")
    before: datetime | None = strawberry.field(default=None, description="createdAt < before")
    key: str | None = strawberry.field(default=None, description='Exact ("": the default key).')
    tags: list[str] | None = strawberry.field(default=None, description="Carrying all of them.")
    top_level: bool | None = strawberry.field(
        default=False, description="Only runs with no parent."
    )

    def runs_filter(self, statuses: Statuses) -> RunsFilter:
        """The filter, `statuses` choosing from `status` (BAD_USER_INPUT for one it refuses)."""
        return runs_filter(
            statuses(self.status),
            agent=self.agent,
            since=self.since,
            before=self.before,
            key=self.key,
            tags=self.tags,
            top_level=self.top_level,
        )


@strawberry.input(
    description="Which settled runs to replay; runs created after the replay never are."
)
class ReplayRunsFilter(BulkRunsFilter):
    status: list[RunStatus] | None = strawberry.field(  # type: ignore[valid-type]
        default=None, description="Settled statuses only; omitted means [FAILED]."
    )


@strawberry.input(
    description="Which active runs to cancel (the runs list's filters); runs created after the "
    "bulk cancel never are."
)
class CancelRunsFilter(BulkRunsFilter):
    status: list[RunStatus] | None = strawberry.field(  # type: ignore[valid-type]
        default=None, description="Active statuses only; omitted means QUEUED, RUNNING, WAITING."
    )


@strawberry.type(
    description="A bulk replay (replayRuns) or a bulk cancel (cancelRuns), advanced by jobs at "
    "its pace; nudged (replay.updated) as it goes."
)
class RunReplay:
    id: strawberry.ID
    kind: RunReplayKind  # type: ignore[valid-type]
    status: ReplayStatus  # type: ignore[valid-type]
    statuses: list[RunStatus]  # type: ignore[valid-type]
    agent: str | None
    since: datetime | None
    before: datetime | None
    key: str | None
    tags: list[str]
    top_level: bool
    reason: str | None = strawberry.field(description="A bulk cancel's reason, as given.")
    requested_by: str | None = strawberry.field(description="Who asked for a bulk cancel.")
    rate: float = strawberry.field(description="At most this many runs taken per second.")
    total: int = strawberry.field(description="Runs it will take (matched when it was made).")
    started: int = strawberry.field(description="Runs started so far (linked by retriedFromId).")
    skipped: int = strawberry.field(
        description="Replay: runs whose input no longer validates. Cancel: runs that settled by "
        "themselves before their turn."
    )
    cancelled: int = strawberry.field(
        description="Runs a bulk cancel cancelled (or asked to stop, when RUNNING) so far."
    )
    processed: int
    waiting_for_run_id: strawberry.ID | None = strawberry.field(
        description="An active run of the next run's agent, which it waits for (one per agent)."
    )
    last_error: str | None
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None

    @classmethod
    def of(cls, r: ReplayRecord) -> RunReplay:
        waiting = r.waiting_for_run_id
        return cls(
            id=strawberry.ID(str(r.id)),
            kind=r.kind,
            status=r.status,
            statuses=[DbRunStatus(s) for s in r.statuses],
            agent=r.agent,
            since=r.since,
            before=r.before,
            key=r.key,
            tags=list(r.tags),
            top_level=r.top_level,
            reason=r.reason,
            requested_by=r.requested_by,
            rate=r.rate,
            total=r.total,
            started=r.started,
            skipped=r.skipped,
            cancelled=r.cancelled,
            processed=r.processed,
            waiting_for_run_id=None if waiting is None else strawberry.ID(str(waiting)),
            last_error=r.last_error,
            created_at=r.created_at,
            updated_at=r.updated_at,
            finished_at=r.finished_at,
        )
