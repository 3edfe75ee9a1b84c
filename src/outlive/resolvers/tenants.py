"""`viewer` and `agents`."""

from __future__ import annotations

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.agents import Agent
from outlive.schema.tenants import Viewer

Info = strawberry.Info[Context, None]


def viewer(info: Info) -> Viewer:
    return Viewer.of(info.context.require_member())  # not null: a run read token is refused


def agents(info: Info) -> list[Agent]:
    if info.context.require().is_run_reader:
        return []
    registry = info.context.services.agents
    found = [Agent.of(a) for a in registry]
    found += [Agent.unavailable(n, e) for n, e in registry.unavailable.items()]
    return sorted(found, key=lambda a: a.name)
