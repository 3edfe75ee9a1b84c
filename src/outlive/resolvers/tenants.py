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
    known = list(ctx.services.agents)
    states = await pauses.agent_states(
        ctx.services.sessions, ctx.tenant_id, [a.name for a in known]
    )
    return [Agent.of(a, paused=s.paused) for a, s in zip(known, states, strict=True)]
