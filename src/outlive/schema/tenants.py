"""Who is asking: `Viewer`, `User`, `Tenant`."""

from __future__ import annotations

from typing import Any

import strawberry

from outlive.schema.members import Role
from outlive.services.tenants import Principal


@strawberry.type
class Tenant:
    id: strawberry.ID
    slug: str
    name: str

    @strawberry.field(  # type: ignore[untyped-decorator]  # strawberry's mypy plugin gap
        description="How many days settled runs are kept (setRetention; else the deployment's "
        "OUTLIVE_RETENTION_DAYS)."
    )
    async def retention_days(self, info: strawberry.Info[Any, Any]) -> int:
        days: int = await info.context.tenant_retention_days()
        return days


@strawberry.type
class User:
    id: strawberry.ID
    email: str


@strawberry.type
class Viewer:
    user: User
    tenant: Tenant
    role: Role = strawberry.field(description="What this token may change (contract §3).")

    @classmethod
    def of(cls, p: Principal) -> Viewer:
        return cls(
            user=User(id=strawberry.ID(str(p.user.id)), email=p.user.email),
            tenant=Tenant(
                id=strawberry.ID(str(p.tenant.id)), slug=p.tenant.slug, name=p.tenant.name
            ),
            role=p.role,
        )
