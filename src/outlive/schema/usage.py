"""`UsageDay`: runs per UTC day, agent and status (contract §4)."""

from __future__ import annotations

import strawberry

from outlive.db.models import RunStatus as DbRunStatus
from outlive.schema.runs import RunStatus
from outlive.services.usage import UsageDay as UsageRecord


@strawberry.type
class UsageDay:
    day: str = strawberry.field(description="YYYY-MM-DD, UTC")
    agent: str
    status: RunStatus  # type: ignore[valid-type]
    count: int

    @classmethod
    def of(cls, u: UsageRecord) -> UsageDay:
        return cls(day=u.day, agent=u.agent, status=DbRunStatus(u.status), count=u.count)
