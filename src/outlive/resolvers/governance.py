"""`setRetention` and `eraseSubject` (ADMIN, contract §4.2 and §7 "Retention and erasure"), and
`payload`: a large payload stored once, read in ranges."""

from __future__ import annotations

from base64 import b64encode

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.governance import ErasureReceipt, PayloadRange
from outlive.schema.tenants import Tenant
from outlive.services import blobs, erasure, retention, sealing
from outlive.services.runs import parse_run_id

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


async def payload(
    info: Info,
    run_id: strawberry.ID,
    ref: str,
    offset: int = 0,
    length: int = blobs.MAX_RANGE,
) -> PayloadRange:
    """Bytes of a large payload the run holds, at most 1 MiB at a time (NOT_FOUND: no such run
    of the token's tenant, or one that does not hold it)."""
    ctx = info.context
    run = parse_run_id(run_id)  # a run read token reads its one run's payloads too
    size, part = await sealing.read_range(  # a sealed one: ranges of the value, opened
        ctx.services.sessions,
        sealing.kek_of(ctx.services.settings),
        ctx.run_tenant(run),
        run,
        ref,
        offset,
        length,
    )
    return PayloadRange(ref=ref, size=size, offset=offset, base64=b64encode(part).decode())
