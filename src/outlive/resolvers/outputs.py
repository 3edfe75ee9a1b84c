"""The `runOutput` subscription: a run's partial output, from a cursor on, then live, until the
run settles (`realtime.outputs`). Tenant-scoped: another tenant's run is an error and nothing
else; a run read token (`createRunReadToken`) reads its one run."""

from __future__ import annotations

from collections.abc import AsyncGenerator

import strawberry

from outlive.errors import NotFound
from outlive.realtime.cursors import check_cursor
from outlive.resolvers.context import Context
from outlive.schema.outputs import OutputChunk
from outlive.services.runs import SETTLED_STATUSES, parse_run_id, read_run

Info = strawberry.Info[Context, None]


async def run_output(
    info: Info, id: strawberry.ID, after: str | None = None
) -> AsyncGenerator[OutputChunk, None]:
    ctx = info.context
    run_id = parse_run_id(id)
    cursor = check_cursor(after)
    tenant_id = ctx.run_tenant(run_id)
    sessions = ctx.services.sessions
    tails = ctx.services.outputs

    async def found() -> bool:
        return await read_run(sessions, tenant_id, run_id) is not None

    # one lookup per run and process while it is being followed, not one per reader
    owned = await (found() if tails is None else tails.owned(run_id, tenant_id, found))
    if not owned:
        raise NotFound(f"no run {id}")
    if tails is None:  # streams are not kept by this deployment: nothing to send
        return

    async def settled() -> bool:
        now = await read_run(sessions, tenant_id, run_id)
        return now is None or now.status in SETTLED_STATUSES

    async for chunk in tails.follow(run_id, cursor, settled, owner=tenant_id):
        yield OutputChunk.of(run_id, chunk)
