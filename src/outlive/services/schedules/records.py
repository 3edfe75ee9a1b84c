"""What the schedules slice hands out, and what a create or an update is given (checked)."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from uuid import UUID

from outlive.db.models import RunConflict
from outlive.db.records import Record
from outlive.errors import BadUserInput
from outlive.services.runs.keys import check_key, check_tags
from outlive.services.schedules import cron

MAX_CATCHUP_S = 7 * 24 * 3600


@dataclass(frozen=True, slots=True)
class ScheduleRecord(Record):
    id: UUID
    tenant_id: UUID
    agent: str
    cron: str
    timezone: str
    input: dict[str, Any]
    key: str
    on_conflict: RunConflict
    tags: tuple[str, ...]
    jitter_seconds: int
    catchup_window_seconds: int
    paused_at: datetime | None
    next_occurrence: datetime | None
    next_fire_at: datetime | None
    last_fire_at: datetime | None
    created_at: datetime
    origin: str | None = None

    @property
    def default_key(self) -> str:
        return f"schedule:{self.id}"


to_schedule = ScheduleRecord.from_row


@dataclass(frozen=True, slots=True)
class ScheduleLimits:
    """`OUTLIVE_TENANT_MAX_SCHEDULES` and `OUTLIVE_SCHEDULE_MIN_INTERVAL_S`."""

    max_schedules: int = 1000
    min_interval_s: int = 60


@dataclass(frozen=True, slots=True)
class ScheduleSpec:
    """A `ScheduleInput`, its input already validated by its agent."""

    agent: str
    cron: str
    input: dict[str, Any] = field(default_factory=dict)
    timezone: str = "UTC"
    key: str | None = None  # None: "schedule:<id>"
    on_conflict: RunConflict = RunConflict.REJECT
    tags: tuple[str, ...] = ()
    jitter_seconds: int = 0
    catchup_window_seconds: int = 300


def check_spec(spec: ScheduleSpec, limits: ScheduleLimits) -> ScheduleSpec:
    """The spec with its cron normalised, or `BadUserInput` saying what is wrong (nothing is
    written before this passes)."""
    expression = cron.check_cron(spec.cron)
    cron.check_timezone(spec.timezone)
    if spec.key is not None:
        check_key(spec.key)
    if not 0 <= spec.jitter_seconds <= cron.MAX_JITTER_S:
        raise BadUserInput(f"jitterSeconds is 0 to {cron.MAX_JITTER_S}")
    if not 0 <= spec.catchup_window_seconds <= MAX_CATCHUP_S:
        raise BadUserInput(f"catchupWindowSeconds is 0 to {MAX_CATCHUP_S} (7 days)")
    smallest = cron.smallest_interval_s(expression)
    if smallest < limits.min_interval_s:
        raise BadUserInput(
            f"cron {spec.cron!r} fires every {smallest:.0f} s at times; schedules fire at most"
            f" every {limits.min_interval_s} s here (OUTLIVE_SCHEDULE_MIN_INTERVAL_S)"
        )
    return ScheduleSpec(
        agent=spec.agent,
        cron=expression if spec.cron.strip().lower() not in cron.ALIASES else spec.cron.strip(),
        input=spec.input,
        timezone=spec.timezone,
        key=spec.key,
        on_conflict=spec.on_conflict,
        tags=check_tags(spec.tags),
        jitter_seconds=spec.jitter_seconds,
        catchup_window_seconds=spec.catchup_window_seconds,
    )
