"""What the runs slice hands out: frozen records built from result rows, by column name."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from outlive.db.models import ACTIVE_STATUSES, RunStatus
from outlive.db.records import Record
from outlive.errors import BadUserInput
from outlive.ids import RunId, TenantId
from outlive.services.ids import parse_uuid

SETTLED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class RunRecord(Record):
    id: RunId
    tenant_id: TenantId
    agent: str
    status: RunStatus
    attempt: int
    input: dict[str, Any]
    output: Any
    error: str | None
    created_at: datetime
    updated_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    event_seq: int = 0
    lease_expires_at: datetime | None = None
    heartbeat_at: datetime | None = None
    lost_attempts: int = 0
    dispatched_at: datetime | None = None
    retried_from_id: RunId | None = None
    handoff_failed_at: datetime | None = None  # the queue could not take it; the relay will
    step_seq: int = 0  # durable steps completed so far (`run_steps`)
    waiting_for: str | None = None  # while WAITING: the signal's name (None: a durable sleep)
    wake_at: datetime | None = None  # while WAITING: its timer, or the signal's timeout
    resumes: int = 0  # claims that resumed it from WAITING: attempts that are not retries
    parent_id: RunId | None = None  # a child run: the run that started it
    root_id: RunId | None = None  # the top of its tree; None: a top-level run (its own root)
    parent_step: str | None = None  # a child's identity under its parent ("name#occurrence")
    depth: int = 0  # 0 at the top of a tree
    children_settled: int = 0  # how many of its children settled so far
    key: str = ""  # its exclusivity key; "" is the agent's default
    on_conflict: str | None = None  # the strategy it was started with (None: before keys)
    queued_behind_id: RunId | None = None  # ENQUEUE: the run just ahead of it in its key's line
    tags: tuple[str, ...] = ()
    idempotency_key: str | None = None
    worker_id: int | None = None  # the liveness key of the worker process holding it (RUNNING)
    paused_at: datetime | None = None  # held by a pause (`paused_by`: run, agent or tenant)
    paused_by: str | None = None
    held_by_budget_id: UUID | None = None  # WAITING for 'budget': the budget that holds it
    budget_override: bool = False  # resumeRun(overBudget: true): it may finish past its budgets
    wait_id: str | None = None  # while WAITING on a wait that named itself: its id
    waiting_show: Any = None  # ... and what it asked to show the person who answers
    code_version: str | None = None  # its agent's code version when it started (first claim)
    schedule_id: UUID | None = None  # the schedule it was started for, and the occurrence
    scheduled_for: datetime | None = None
    priority: int = 3  # among its tenant's waiting runs: 1 first
    not_before: datetime | None = None  # debounced: not admitted before this
    debounce_until: datetime | None = None  # ... which later starts never move past this

    @property
    def is_waiting(self) -> bool:
        """QUEUED and not admitted yet: waiting for a slot under its tenant's cap (a run queued
        behind another run of its key waits for its turn first: `is_behind`)."""
        return (
            self.status == RunStatus.QUEUED
            and self.dispatched_at is None
            and self.queued_behind_id is None
        )

    @property
    def is_behind(self) -> bool:
        """QUEUED behind another run of its key (ENQUEUE): not active until its turn."""
        return self.status == RunStatus.QUEUED and self.queued_behind_id is not None

    @property
    def tree_root(self) -> RunId:
        """The top of its tree: itself for a top-level run."""
        return self.root_id or self.id

    @property
    def is_held(self) -> bool:
        """Held by a pause or a budget (`runs(paused: true)`)."""
        return self.paused_at is not None or self.held_by_budget_id is not None

    @property
    def is_active(self) -> bool:
        """QUEUED, RUNNING or WAITING: not settled (a run behind its key's head included)."""
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class EventRecord(Record):
    seq: int
    type: str
    data: dict[str, Any]
    at: datetime


@dataclass(slots=True)
class StartedRun:
    run: RunRecord  # replaced after the commit when the queue could not take the run
    created: bool
    idempotent: bool = False  # handed back for its idempotency key


@dataclass(frozen=True, slots=True)
class RunPage:
    runs: list[RunRecord]
    cursors: list[str]
    has_next_page: bool


to_record = RunRecord.from_row  # the record of a `runs` row


@dataclass(frozen=True, slots=True)
class StepRecord(Record):
    """A completed durable step, as `Run.steps` shows it (its result stays in the journal)."""

    seq: int
    name: str
    occurrence: int
    attempt: int
    completed_at: datetime
    started_at: datetime | None = None  # when its gate let it start (None: before round five)
    # the model usage it recorded (`ctx.record_usage`): none for most steps
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    model: str | None = None
    cost_usd: Decimal | None = None


to_step = StepRecord.from_row  # the record of a `run_steps` row


to_event = EventRecord.from_row  # the record of a `run_events` row


def as_json(value: Any) -> str | None:
    return None if value is None else json_text(value)


def json_text(value: Any) -> str:
    """`value` as JSON text for a jsonb column; `NaN` and `Infinity` (a GraphQL literal such as
    `1e999` parses to one) are not JSON, so PostgreSQL would refuse them: `BadUserInput`."""
    try:
        return json.dumps(value, allow_nan=False)
    except ValueError:
        raise BadUserInput("a number in the JSON is out of range (not finite)") from None


def parse_run_id(value: str) -> RunId:
    return RunId(parse_uuid(value, what="run"))
