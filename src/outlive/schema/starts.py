"""What `startRun` and `signalRun` are given (contract §4, §7 "Debounce", "Priority")."""

from __future__ import annotations

import strawberry
from strawberry.scalars import JSON

from outlive.schema.runs import RunConflict


@strawberry.input(description="Needs a key; maxSeconds bounds the whole hold.")
class DebounceInput:
    seconds: float = strawberry.field(
        description="The run starts this long after the latest start of its key (at most a day)."
    )
    max_seconds: float | None = strawberry.field(
        default=None,
        description="...but never later than this after the first; null: no bound.",
    )


@strawberry.input
class StartRunInput:
    agent: str
    input: JSON | None = strawberry.field(default=None, description="Omitted or null means {}.")
    key: str | None = strawberry.field(
        default=None,
        description="Exclusivity key, 1..200 characters; null or omitted: the agent's default "
        'key ("" unless the agent sets one).',
    )
    on_conflict: RunConflict | None = strawberry.field(  # type: ignore[valid-type]
        default=None,
        description="Null: the agent's default (RETURN_EXISTING unless the agent sets one).",
    )
    tags: list[str] | None = strawberry.field(
        default=None, description="At most 10, each 1..64 characters of [A-Za-z0-9:_.@/-]."
    )
    idempotency_key: str | None = strawberry.field(
        default=None,
        description="1..200 characters; the same key within 24 h hands back the same run "
        "(created: false), settled or not.",
    )
    priority: int | None = strawberry.field(
        default=None,
        description="1..5, default 3: orders this tenant's own QUEUED runs (1 first); never "
        "takes a slot from another tenant.",
    )
    debounce: DebounceInput | None = strawberry.field(
        default=None,
        description="Holds the run back: a later start of its key while it has not started "
        "replaces its input and moves its notBefore (created: false). onConflict defaults to "
        "ENQUEUE then.",
    )


@strawberry.input
class SignalRunInput:
    id: strawberry.ID
    name: str = strawberry.field(description="The signal's name (1 to 128 characters).")
    payload: JSON | None = strawberry.field(
        default=None, description="Any JSON, at most 64 KiB; what the run's wait returns."
    )
    idempotency_key: str | None = strawberry.field(
        default=None, description="A key seen before for this run: the signal is not taken again."
    )
    wait_id: str | None = strawberry.field(
        default=None,
        description="The `Run.waitId` this signal answers: taken by that wait only, at once; "
        "not accepted (nothing kept) once that wait is over. Null: kept for the next wait of "
        "its name, first in, first out.",
    )
