"""`viewer` and `agents`."""

from __future__ import annotations

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.agents import Agent
from outlive.schema.tenants import Viewer
from outlive.services import pauses

Info = strawberry.Info[Context, None]


def viewer(info: Info) -> Viewer:
    return Viewer.of(info.context.require_member())  # not null: a run read token is refused


async def agents(info: Info) -> list[Agent]:
    ctx = info.context
    if ctx.require().is_run_reader:
        return []
    registry = ctx.services.agents
    known = list(registry)
    names = [a.name for a in known] + list(registry.unavailable)
    paused = {
        s.agent: s.paused
        for s in await pauses.agent_states(ctx.services.sessions, ctx.tenant_id, names)
    }
    found = [Agent.of(a, paused=paused[a.name]) for a in known]
    found += [Agent.unavailable(n, e, paused=paused[n]) for n, e in registry.unavailable.items()]
    return sorted(found, key=lambda a: a.name)
