"""The `nudges` subscription: the connection's tenant, from its token; nothing else."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.nudges import Nudge

Info = strawberry.Info[Context, None]


async def nudges(info: Info) -> AsyncGenerator[Nudge, None]:
    tenant_id = info.context.tenant_id
    hub = info.context.services.hub
    if hub is None:  # realtime off: the socket stays quiet and clients refresh on fetch
        await asyncio.Event().wait()
        return
    async with hub.subscribe(tenant_id) as subscriber:
        while True:
            yield Nudge.of(await subscriber.next())
