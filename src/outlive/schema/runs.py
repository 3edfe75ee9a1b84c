"""Runs: `Run`, its timeline, the connection and the start/signal payloads (contract §4); the
inputs of a start and a signal are in `schema.starts`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from strawberry.scalars import JSON

from outlive.db.models import RunConflict as DbRunConflict
from outlive.db.models import RunStatus as DbRunStatus
from outlive.schema.scalars import as_json
from outlive.schema.steps import RunStep
from outlive.services.runs import MAX_ATTEMPTS, EventRecord, RunPage, RunRecord, StepRecord
from outlive.services.runs import RunOrder as DbRunOrder
from outlive.services.runs.tree import StatusCount as StatusCountRecord
from outlive.services.usage_tokens import RunUsage as UsageRecord
from outlive.services.waits import wait_id_of

RunStatus = strawberry.enum(DbRunStatus, name="RunStatus")
RunConflict = strawberry.enum(
    DbRunConflict,
    name="RunConflict",
    description="What `startRun` does when its key already has an active run.",
)
RunOrder = strawberry.enum(
    DbRunOrder, name="RunOrder", description="The order of `runs`, by creation time."
)


@strawberry.type
class RunEvent:
    seq: int
    type: str
    data: JSON
    at: datetime

    @classmethod
    def of(cls, record: EventRecord) -> RunEvent:
        return cls(seq=record.seq, type=record.type, data=as_json(record.data), at=record.at)


@strawberry.type(description="Model usage recorded by a run's steps, summed.")
class RunUsage:
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = strawberry.field(
        description="USD, from the genai-prices table, for the models it prices (the others "
        "are in `unpricedModels`); null when it priced none."
    )
    unpriced_models: list[str] = strawberry.field(
        default_factory=list, description="Models whose usage has no price (counted 0 USD)."
    )
    abandoned_requests: int = strawberry.field(
        default=0,
        description="Model calls billed by the provider but cut before they were recorded (a "
        "worker killed mid-call, a cancel, a timeout): not in `requests`.",
    )
    abandoned_input_tokens: int = strawberry.field(
        default=0, description="The input tokens of those calls, when their stream said."
    )
    abandoned_output_tokens: int = strawberry.field(
        default=0, description="The output tokens of those calls, when their stream said."
    )

    @classmethod
    def of(cls, u: UsageRecord) -> RunUsage:
        cost = None if u.cost_usd is None else float(u.cost_usd)
        return cls(
            requests=u.requests,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cost_usd=cost,
            unpriced_models=list(u.unpriced_models),
            abandoned_requests=u.abandoned_requests,
            abandoned_input_tokens=u.abandoned_input_tokens,
            abandoned_output_tokens=u.abandoned_output_tokens,
        )


@strawberry.type(description="How many runs have a status (`Run.childCounts`).")
class StatusCount:
    status: RunStatus  # type: ignore[valid-type]
    count: int

    @classmethod
    def of(cls, record: StatusCountRecord) -> StatusCount:
        return cls(status=record.status, count=record.count)


def retries_left(r: RunRecord) -> int:
    """Retries still allowed for retryable faults: claims that resumed the run from WAITING and
    attempts that lost their worker use none. A QUEUED run is counted as its next claim will
    be (a retry that is due has been used)."""
    executed = r.attempt - r.lost_attempts - r.resumes + (r.status == DbRunStatus.QUEUED)
    return max(0, MAX_ATTEMPTS - max(1, executed))


@strawberry.type
class Run:
    id: strawberry.ID
    agent: str
    status: RunStatus  # type: ignore[valid-type]
    attempt: int
    input: JSON
    output: JSON | None
    error: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    heartbeat_at: datetime | None = strawberry.field(
        description="The last sign of life (heartbeat or event) of the attempt holding the run."
    )
    lease_expires_at: datetime | None = strawberry.field(
        description="While RUNNING: when another worker may take the run over, unless the "
        "attempt holding it heartbeats first."
    )
    lost_attempts: int = strawberry.field(
        description="Attempts whose worker was lost (their lease expired); they do not use up "
        "the run's retries, but a run fails after losing its worker 3 times."
    )
    record: strawberry.Private[RunRecord]
    retried_from_id: strawberry.ID | None = strawberry.field(
        default=None, description="The run this one retried (retryRun, replayRuns), if any."
    )
    key: str = strawberry.field(
        default="", description='Its exclusivity key; "" for the agent\'s default key.'
    )
    tags: list[str] = strawberry.field(default_factory=list)
    code_version: str | None = strawberry.field(
        default=None, description="Its agent's code version when it started (null until then)."
    )
    queued_behind_id: strawberry.ID | None = strawberry.field(
        default=None,
        description="ENQUEUE: the run just ahead of this one in its key's line, while it waits "
        "its turn (and as it was when it settled, should it settle waiting).",
    )
    schedule_id: strawberry.ID | None = strawberry.field(default=None)
    scheduled_for: datetime | None = strawberry.field(
        default=None, description="The occurrence of its schedule this run is for."
    )
    priority: int = strawberry.field(
        default=3, description="Among its tenant's QUEUED runs: 1 starts first, 5 last."
    )
    not_before: datetime | None = strawberry.field(
        default=None, description="A debounced run does not start before this."
    )
    paused_at: datetime | None = strawberry.field(
        default=None,
        description="Held by pauseRun, pauseAgent or a tenant's pause (since then); null "
        "otherwise. A held run is WAITING (a RUNNING one from its next step).",
    )
    wake_at: datetime | None = strawberry.field(
        default=None,
        description="While WAITING: when its timer (a sleep), or its signal's timeout, fires; "
        "null when it waits for a signal with no timeout, or is not WAITING.",
    )
    waiting_for: str | None = strawberry.field(
        default=None,
        description="While WAITING: the name of the signal the run waits for; null for a "
        "durable sleep (and whenever the run is not WAITING).",
    )

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Timeline events with seq > after, ascending."
    )
    async def events(
        self, info: strawberry.Info[Any, Any], after: int | None = 0, first: int | None = 100
    ) -> list[RunEvent]:
        events = await info.context.run_events(
            self.record.id, after=after or 0, first=100 if first is None else first
        )
        return [RunEvent.of(e) for e in cast(list[EventRecord], events)]

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Completed durable steps with seq > after, in completion order."
    )
    async def steps(
        self, info: strawberry.Info[Any, Any], after: int | None = 0, first: int | None = 100
    ) -> list[RunStep]:
        steps = await info.context.run_steps(
            self.record.id, after=after or 0, first=100 if first is None else first
        )
        return [RunStep.of(s, self.record.id) for s in cast(list[StepRecord], steps)]

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="While the run waits for a slot under its tenant's cap (QUEUED, not yet "
        "handed to a worker): why, and its place in line. Null otherwise."
    )
    async def waiting_reason(self, info: strawberry.Info[Any, Any]) -> str | None:
        reason = await info.context.waiting_reason(self.record)
        return cast(str | None, reason)

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="The runs that retried this one (retryRun, replayRuns), newest first, at "
        "most 10: the other way along retriedFromId."
    )
    async def retried_as_ids(self, info: strawberry.Info[Any, Any]) -> list[strawberry.ID]:
        found = await info.context.run_retries(self.record.id)
        return [strawberry.ID(str(run_id)) for run_id in found]

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Model usage recorded by the run's steps, summed (steps reused from "
        "another run count there, not here)."
    )
    async def usage(self, info: strawberry.Info[Any, Any]) -> RunUsage:
        found = await info.context.run_usage(self.record.id)
        return RunUsage.of(cast(UsageRecord, found))

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Model usage of this run and all its descendants (its children, theirs, "
        "…), summed: what a delegated task cost, in one read."
    )
    async def tree_usage(self, info: strawberry.Info[Any, Any]) -> RunUsage:
        found = await info.context.run_tree_usage(self.record.id)
        return RunUsage.of(cast(UsageRecord, found))

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Retries still allowed for retryable faults: 2 for a fresh run (resumes "
        "from WAITING and lost workers use none)."
    )
    def retries_left(self) -> int:
        return retries_left(self.record)

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="While WAITING for a signal: the id of that wait. A `signalRun` that "
        "passes it as `waitId` answers this wait only: it is never kept for a later wait, and "
        "is not accepted once this wait is over. Null whenever `waitingFor` is null."
    )
    def wait_id(self) -> str | None:
        return wait_id_of(self.record)

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description='Held by this budget (WAITING, waitingFor "budget"); null otherwise.'
    )
    def held_by_budget_id(self) -> strawberry.ID | None:
        held = self.record.held_by_budget_id
        waiting = self.record.status == DbRunStatus.WAITING
        return strawberry.ID(str(held)) if held is not None and waiting else None

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="While WAITING for a signal: what the agent asked to show the person who "
        "answers (`ctx.wait_for(..., show=)`); a pydantic-ai tool call waiting for approval "
        "shows `{tool, args, toolCallId}`. Null otherwise."
    )
    def waiting_show(self) -> JSON | None:
        if wait_id_of(self.record) is None:
            return None
        return as_json(self.record.waiting_show)

    @strawberry.field(
        description="A child run: the run that started it (ctx.call, ctx.spawn, ctx.map)."
    )  # type: ignore[untyped-decorator]
    def parent_id(self) -> strawberry.ID | None:
        parent = self.record.parent_id
        return None if parent is None else strawberry.ID(str(parent))

    @strawberry.field(description="The top of its tree of runs; itself for a top-level run.")  # type: ignore[untyped-decorator]
    def root_id(self) -> strawberry.ID:
        return strawberry.ID(str(self.record.tree_root))

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="The child runs it started, oldest first."
    )
    async def children(
        self,
        info: strawberry.Info[Any, Any],
        first: int | None = 20,
        after: str | None = None,
        status: list[RunStatus] | None = None,  # type: ignore[valid-type]
    ) -> RunConnection:
        page = await info.context.run_children(
            self.record, first=20 if first is None else first, after=after, statuses=status
        )
        return RunConnection.of(cast(RunPage, page))

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Its children counted per status, in the order of RunStatus; a status "
        "none of them has is left out ([] for a run without children)."
    )
    async def child_counts(self, info: strawberry.Info[Any, Any]) -> list[StatusCount]:
        counts = await info.context.run_child_counts(self.record.id)
        return [StatusCount.of(c) for c in cast(list[StatusCountRecord], counts)]

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="The runs above it in its tree: the root first, its parent last (at most "
        "8); [] for a top-level run."
    )
    async def ancestors(self, info: strawberry.Info[Any, Any]) -> list[Run]:
        found = await info.context.run_ancestors(self.record.id)
        return [Run.of(r) for r in cast(list[RunRecord], found)]

    @classmethod
    def of(cls, r: RunRecord) -> Run:
        return cls(
            id=strawberry.ID(str(r.id)),
            agent=r.agent,
            status=r.status,
            attempt=r.attempt,
            input=as_json(r.input),
            output=as_json(r.output),
            error=r.error,
            created_at=r.created_at,
            started_at=r.started_at,
            finished_at=r.finished_at,
            cancel_requested_at=r.cancel_requested_at,
            heartbeat_at=r.heartbeat_at,
            lease_expires_at=r.lease_expires_at if r.status == DbRunStatus.RUNNING else None,
            lost_attempts=r.lost_attempts,
            record=r,
            retried_from_id=None
            if r.retried_from_id is None
            else strawberry.ID(str(r.retried_from_id)),
            key=r.key,
            tags=list(r.tags),
            code_version=r.code_version,
            queued_behind_id=None
            if r.queued_behind_id is None
            else strawberry.ID(str(r.queued_behind_id)),
            schedule_id=None if r.schedule_id is None else strawberry.ID(str(r.schedule_id)),
            scheduled_for=r.scheduled_for,
            priority=r.priority,
            not_before=r.not_before,
            # plain data, not resolvers, so a list of runs is answered by a compiled plan
            waiting_for=r.waiting_for if r.status == DbRunStatus.WAITING else None,
            wake_at=r.wake_at if r.status == DbRunStatus.WAITING else None,
            paused_at=r.paused_at if r.is_active else None,
        )


@strawberry.type
class RunEdge:
    cursor: str
    node: Run


@strawberry.type
class PageInfo:
    has_next_page: bool
    end_cursor: str | None


@strawberry.type(description="Newest first.")
class RunConnection:
    edges: list[RunEdge]
    page_info: PageInfo
    # Plain data, counted by the root resolver when the operation asks for it, so that a page
    # with its total is still answered by a compiled plan (`graphql/plans.py`).
    total_count: int | None = strawberry.field(
        default=None,
        description="How many runs match the filters, on every page: counted up to 1,001, so"
        " 1,001 means more than 1,000 (the console says 1,000+). Null where the list is not"
        " counted (a run's children: see childCounts).",
    )

    @classmethod
    def of(cls, page: RunPage, total_count: int | None = None) -> RunConnection:
        edges = [
            RunEdge(cursor=c, node=Run.of(r)) for r, c in zip(page.runs, page.cursors, strict=True)
        ]
        return cls(
            edges=edges,
            page_info=PageInfo(
                has_next_page=page.has_next_page,
                end_cursor=page.cursors[-1] if page.cursors else None,
            ),
            total_count=total_count,
        )


@strawberry.type
class StartRunPayload:
    run: Run
    created: bool = strawberry.field(description="false: the active run was handed back")


@strawberry.type
class SignalRunPayload:
    run: Run
    accepted: bool = strawberry.field(
        description="false: a repeated idempotencyKey, a settled run, or a waitId whose wait is "
        "over; nothing was delivered"
    )
