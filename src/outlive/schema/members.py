"""`Role` and `Member` (contract §4.2): who is in the tenant, and what each may change."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.db.models import Role as RoleValue
from outlive.services.members import MemberRecord

# strawberry.enum marks the class itself: the domain enum is the GraphQL one, typed as it is.
strawberry.enum(
    RoleValue,
    name="Role",
    description="What a token may change: VIEWER reads; OPERATOR also acts on runs and "
    "schedules; ADMIN also manages members, invitations, webhooks, budgets and data.",
)
Role = RoleValue


@strawberry.type
class Member:
    user_id: strawberry.ID
    email: str
    role: Role
    joined_at: datetime
    tokens: int = strawberry.field(description="Live API tokens (run read tokens aside).")

    @classmethod
    def of(cls, m: MemberRecord) -> Member:
        return cls(
            user_id=strawberry.ID(str(m.user_id)),
            email=m.email,
            role=m.role,
            joined_at=m.joined_at,
            tokens=m.tokens,
        )
