"""What the runs slice hands out: frozen records built from result rows, by column name."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from outlive.db.models import ACTIVE_STATUSES, RunStatus
from outlive.ids import RunId, TenantId
from outlive.services.ids import parse_uuid

SETTLED_STATUSES = (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


@dataclass(frozen=True, slots=True)
class RunRecord:
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
    key: str = ""  # its exclusivity key; "" is the agent's default
    on_conflict: str | None = None  # the strategy it was started with (None: before keys)
    queued_behind_id: RunId | None = None  # ENQUEUE: the run just ahead of it in its key's line
    tags: tuple[str, ...] = ()
    idempotency_key: str | None = None

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
    def is_active(self) -> bool:
        """QUEUED, RUNNING or WAITING: not settled (a run behind its key's head included)."""
        return self.status in ACTIVE_STATUSES


@dataclass(frozen=True, slots=True)
class EventRecord:
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


def to_record(m: Mapping[Any, Any]) -> RunRecord:
    return RunRecord(
        id=RunId(m["id"]),
        tenant_id=TenantId(m["tenant_id"]),
        agent=m["agent"],
        status=RunStatus(m["status"]),
        attempt=m["attempt"],
        input=m["input"],
        output=m["output"],
        error=m["error"],
        created_at=m["created_at"],
        updated_at=m["updated_at"],
        started_at=m["started_at"],
        finished_at=m["finished_at"],
        cancel_requested_at=m["cancel_requested_at"],
        event_seq=m["event_seq"],
        lease_expires_at=m["lease_expires_at"],
        heartbeat_at=m["heartbeat_at"],
        lost_attempts=m["lost_attempts"],
        dispatched_at=m["dispatched_at"],
        retried_from_id=m["retried_from_id"],
        handoff_failed_at=m["handoff_failed_at"],
        step_seq=m.get("step_seq", 0),
        waiting_for=m["waiting_for"],
        wake_at=m["wake_at"],
        resumes=m["resumes"],
        key=m.get("key", ""),
        on_conflict=m.get("on_conflict"),
        queued_behind_id=m.get("queued_behind_id"),
        tags=tuple(m.get("tags") or ()),
        idempotency_key=m.get("idempotency_key"),
    )


@dataclass(frozen=True, slots=True)
class StepRecord:
    """A completed durable step, as `Run.steps` shows it (its result stays in the journal)."""

    seq: int
    name: str
    occurrence: int
    attempt: int
    completed_at: datetime


def to_step(m: Mapping[Any, Any]) -> StepRecord:
    return StepRecord(
        seq=m["seq"],
        name=m["name"],
        occurrence=m["occurrence"],
        attempt=m["attempt"],
        completed_at=m["completed_at"],
    )


def to_event(m: Mapping[Any, Any]) -> EventRecord:
    return EventRecord(seq=m["seq"], type=m["type"], data=m["data"], at=m["at"])


def as_json(value: Any) -> str | None:
    return None if value is None else json.dumps(value)


def parse_run_id(value: str) -> RunId:
    return RunId(parse_uuid(value, what="run"))
