"""`setRetention` and `eraseSubject` (ADMIN, contract §4.2 and §7 "Retention and erasure")."""

from __future__ import annotations

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.governance import ErasureReceipt
from outlive.schema.tenants import Tenant
from outlive.services import erasure, retention

Info = strawberry.Info[Context, None]


async def set_retention(info: Info, days: int) -> Tenant:
    ctx = info.context
    tenant = ctx.require_member().tenant
    await retention.set_retention(ctx.services.sessions, ctx.tenant_id, days)
    return Tenant(id=strawberry.ID(str(tenant.id)), slug=tenant.slug, name=tenant.name)


async def erase_subject(info: Info, tag: str) -> ErasureReceipt:
    ctx = info.context
    member = ctx.require_member()
    receipt = await erasure.erase_subject(
        ctx.services.sessions,
        ctx.tenant_id,
        tag,
        by=member.user.email,
        forget=ctx.services.forget,
    )
    return ErasureReceipt.of(receipt)
