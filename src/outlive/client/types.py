"""What the client gives back: pydantic models of the schema's types, by their GraphQL names
(camelCase on the wire, snake_case here). Each model's fields are exactly what the client's
operations select (`operations`), which CI checks against the served schema
(`tests/client/test_schema.py`)."""

from __future__ import annotations

from datetime import datetime
from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel


class _Model(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, frozen=True)


class DebounceInput(_Model):
    """`startRun(debounce:)`: the run starts `seconds` after its key's latest start, never later
    than `max_seconds` after the first (None: no bound)."""

    seconds: float
    max_seconds: float | None = None


class RunStatus(StrEnum):
    QUEUED = "QUEUED"
    RUNNING = "RUNNING"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    CANCELLED = "CANCELLED"
    WAITING = "WAITING"

    @property
    def settled(self) -> bool:
        return self in (RunStatus.SUCCEEDED, RunStatus.FAILED, RunStatus.CANCELLED)


class RunConflict(StrEnum):
    RETURN_EXISTING = "RETURN_EXISTING"
    ENQUEUE = "ENQUEUE"
    CANCEL_PREVIOUS = "CANCEL_PREVIOUS"
    REJECT = "REJECT"
    SIGNAL_EXISTING = "SIGNAL_EXISTING"


class RunOrder(StrEnum):
    NEWEST_FIRST = "NEWEST_FIRST"
    OLDEST_FIRST = "OLDEST_FIRST"


class RunUsage(_Model):
    requests: int
    input_tokens: int
    output_tokens: int
    cost_usd: float | None
    unpriced_models: list[str]


class Run(_Model):
    id: str
    agent: str
    status: RunStatus
    attempt: int
    input: Any
    output: Any
    error: str | None
    key: str
    tags: list[str]
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    cancel_requested_at: datetime | None
    retries_left: int
    waiting_for: str | None
    wake_at: datetime | None
    wait_id: str | None
    waiting_show: Any
    paused_at: datetime | None
    parent_id: str | None
    root_id: str
    usage: RunUsage


class StartRunPayload(_Model):
    created: bool
    run: Run


class SignalRunPayload(_Model):
    accepted: bool
    run: Run


class RunEvent(_Model):
    seq: int
    type: str
    data: Any
    at: datetime


class RunStep(_Model):
    seq: int
    name: str
    occurrence: int
    attempt: int
    completed_at: datetime


class PageInfo(_Model):
    has_next_page: bool
    end_cursor: str | None


class RunEdge(_Model):
    cursor: str
    node: Run


class RunConnection(_Model):
    edges: list[RunEdge]
    page_info: PageInfo
    total_count: int | None

    @property
    def runs(self) -> list[Run]:
        return [edge.node for edge in self.edges]


class OutputChunk(_Model):
    run_id: str
    stream: str
    cursor: str
    text: str
    done: bool
    kind: str
    attempt: int
    reset: bool
