"""The `nudges` subscription: the connection's tenant, from its token; nothing else.

This resolver answers any document strawberry accepts (fragments, directives, variables, several
operations), executed per subscriber. The plain selection is sent by the socket transport from
shared, pre-encoded frames instead (`realtime.sockets.NudgesTransportWS`), with the same frames.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator

import strawberry

from outlive.realtime.hub import SubscriberClosed
from outlive.realtime.sockets import close_subscriber
from outlive.resolvers.context import Context
from outlive.schema.nudges import Nudge

Info = strawberry.Info[Context, None]


async def nudges(info: Info) -> AsyncGenerator[Nudge, None]:
    tenant_id = info.context.tenant_id
    hub = info.context.services.hub
    if hub is None or info.context.require().is_run_reader:
        # realtime off: the socket stays quiet and clients refresh on fetch; a run read token
        # hears no tenant's nudges (it follows its run with `runOutput` and reads)
        await asyncio.Future()
        return
    try:
        async with hub.subscribe(tenant_id) as subscriber:
            while True:
                yield Nudge.of((await subscriber.next()).nudge)
    except SubscriberClosed as closed:  # unsubscribed first: a stalled peer may never read this
        await close_subscriber(info.context.request, closed)
    await asyncio.Future()  # the socket is closing; its handler cancels this operation
