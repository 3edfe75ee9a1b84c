"""Run replays: `RunReplay`, its status and the `replayRuns` filter."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.db.models import ReplayStatus as DbReplayStatus
from outlive.db.models import RunStatus as DbRunStatus
from outlive.schema.runs import RunStatus
from outlive.services.replays import ReplayRecord

ReplayStatus = strawberry.enum(DbReplayStatus, name="ReplayStatus")


@strawberry.input(
    description="Which settled runs to replay; runs created after the replay never are."
)
class ReplayRunsFilter:
    status: list[RunStatus] | None = strawberry.field(  # type: ignore[valid-type]
        default=None, description="Settled statuses only; omitted means [FAILED]."
    )
    agent: str | None = None
    since: datetime | None = strawberry.field(default=None, description="createdAt >= since")


@strawberry.type(description="A bulk replay, advanced by jobs at its pace; nudged as it goes.")
class RunReplay:
    id: strawberry.ID
    status: ReplayStatus  # type: ignore[valid-type]
    statuses: list[RunStatus]  # type: ignore[valid-type]
    agent: str | None
    since: datetime | None
    rate: float = strawberry.field(description="At most this many runs started per second.")
    total: int = strawberry.field(description="Runs it will replay (matched when it was made).")
    started: int = strawberry.field(description="Runs started so far (linked by retriedFromId).")
    skipped: int = strawberry.field(description="Runs whose input no longer validates.")
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
            status=r.status,
            statuses=[DbRunStatus(s) for s in r.statuses],
            agent=r.agent,
            since=r.since,
            rate=r.rate,
            total=r.total,
            started=r.started,
            skipped=r.skipped,
            processed=r.processed,
            waiting_for_run_id=None if waiting is None else strawberry.ID(str(waiting)),
            last_error=r.last_error,
            created_at=r.created_at,
            updated_at=r.updated_at,
            finished_at=r.finished_at,
        )
