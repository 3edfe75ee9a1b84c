"""`Nudge`: what the subscription sends. Never row data (contract §5)."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.realtime.nudges import Nudge as NudgeRecord


@strawberry.type(description="Something changed: re-query what shows it. Never row data.")
class Nudge:
    type: str
    tenant_id: strawberry.ID
    at: datetime
    id: strawberry.ID | None

    @classmethod
    def of(cls, n: NudgeRecord) -> Nudge:
        return cls(
            type=n.type,
            tenant_id=strawberry.ID(str(n.tenant_id)),
            at=n.at,
            id=None if n.id is None else strawberry.ID(str(n.id)),
        )
