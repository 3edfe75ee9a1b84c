"""Schedules as data (contract §4.2): `Schedule`, `ScheduleInput`."""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import strawberry
from strawberry.scalars import JSON

from outlive.schema.runs import RunConflict, RunConnection
from outlive.schema.scalars import as_json
from outlive.services.runs import RunPage
from outlive.services.schedules import ScheduleRecord


@strawberry.type
class Schedule:
    id: strawberry.ID
    agent: str
    cron: str = strawberry.field(description="5 fields, or @hourly/@daily/@weekly/@monthly.")
    timezone: str = strawberry.field(description="IANA name; occurrences follow its DST rules.")
    input: JSON
    key: str = strawberry.field(description='The runs\' key; default "schedule:<id>".')
    on_conflict: RunConflict = strawberry.field(  # type: ignore[valid-type]
        description="The overlap policy: REJECT skips an occurrence while the last run is "
        "active (the default)."
    )
    tags: list[str]
    paused: bool
    jitter_seconds: int
    catchup_window_seconds: int = strawberry.field(
        description="Occurrences missed by less than this (an outage) still run, once each."
    )
    next_fire_at: datetime | None = strawberry.field(description="Null while paused.")
    last_fire_at: datetime | None
    record: strawberry.Private[ScheduleRecord]

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="Its runs, newest first."
    )
    async def runs(
        self, info: strawberry.Info[Any, Any], first: int | None = 20, after: str | None = None
    ) -> RunConnection:
        page = await info.context.schedule_runs(
            self.record.id, first=20 if first is None else first, after=after
        )
        return RunConnection.of(cast(RunPage, page))

    @classmethod
    def of(cls, s: ScheduleRecord) -> Schedule:
        return cls(
            id=strawberry.ID(str(s.id)),
            agent=s.agent,
            cron=s.cron,
            timezone=s.timezone,
            input=as_json(s.input),
            key=s.key,
            on_conflict=s.on_conflict,
            tags=list(s.tags),
            paused=s.paused_at is not None,
            jitter_seconds=s.jitter_seconds,
            catchup_window_seconds=s.catchup_window_seconds,
            next_fire_at=s.next_fire_at,
            last_fire_at=s.last_fire_at,
            record=s,
        )


@strawberry.input
class ScheduleInput:
    agent: str
    cron: str
    timezone: str | None = "UTC"
    input: JSON | None = strawberry.field(default_factory=dict)
    key: str | None = None
    on_conflict: RunConflict | None = RunConflict.REJECT  # type: ignore[valid-type]
    tags: list[str] | None = strawberry.field(default_factory=list)
    jitter_seconds: int | None = 0
    catchup_window_seconds: int | None = 300
