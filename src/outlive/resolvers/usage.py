"""`usage(days)`: rolled-up days from `usage_daily`, the rest counted live."""

from __future__ import annotations

import strawberry

from outlive.resolvers.context import Context
from outlive.schema.usage import AgentStats, UsageDay, UsageTokensDay
from outlive.services import usage as usage_service
from outlive.services import usage_tokens as tokens_service

Info = strawberry.Info[Context, None]


async def usage(info: Info, days: int | None = 30) -> list[UsageDay]:
    ctx = info.context
    found = await usage_service.usage(
        ctx.services.sessions, ctx.tenant_id, days=30 if days is None else days
    )
    return [UsageDay.of(u) for u in found]


async def agent_stats(info: Info, hours: int = 24) -> list[AgentStats]:
    ctx = info.context
    found = await usage_service.agent_stats(ctx.services.sessions, ctx.tenant_id, hours=hours)
    return [AgentStats.of(a) for a in found]


async def usage_tokens(info: Info, days: int | None = 30) -> list[UsageTokensDay]:
    ctx = info.context
    found = await tokens_service.usage_tokens(
        ctx.services.sessions, ctx.tenant_id, days=30 if days is None else days
    )
    return [UsageTokensDay.of(u) for u in found]
