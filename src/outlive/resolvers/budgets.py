"""`budgets`, `setBudget`, `deleteBudget` (ADMIN), and the pauses: `pauseRun`, `resumeRun`,
`pauseAgent`, `resumeAgent` (OPERATOR; `resumeRun(overBudget: true)` lets a run spend past a
budget, so it is ADMIN's), `agentStates`."""

from __future__ import annotations

from decimal import Decimal
from typing import Annotated

import strawberry

from outlive.db.models import BudgetBreach, Role
from outlive.errors import BadUserInput, Forbidden
from outlive.resolvers.context import Context
from outlive.schema.budgets import AgentState, Budget, BudgetInput
from outlive.schema.runs import Run
from outlive.services import budgets, pauses
from outlive.services.ids import parse_uuid
from outlive.services.runs import parse_run_id

Info = strawberry.Info[Context, None]


async def list_budgets(info: Info) -> list[Budget]:
    ctx = info.context
    ctx.require_member()
    return [Budget.of(b) for b in await budgets.list_budgets(ctx.services.sessions, ctx.tenant_id)]


def _spec(input: BudgetInput) -> budgets.BudgetSpec:
    try:
        usd = None if input.limit_usd is None else Decimal(str(input.limit_usd))
    except ArithmeticError:
        raise BadUserInput("limitUsd is a positive amount") from None
    return budgets.BudgetSpec(
        scope=input.scope,
        period=input.period,
        target=input.target,
        limit_tokens=input.limit_tokens,
        limit_usd=usd,
        warn_at=0.8 if input.warn_at is None else input.warn_at,
        on_breach=input.on_breach or BudgetBreach.PAUSE,
    )


async def set_budget(info: Info, input: BudgetInput) -> Budget:
    ctx = info.context
    spec = budgets.check_spec(_spec(input))  # BAD_USER_INPUT before anything is written
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        found = await budgets.set_budget(uow, spec, instances=ctx.services.instances)
    return Budget.of(found)


async def delete_budget(info: Info, id: strawberry.ID) -> bool:
    ctx = info.context
    budget_id = parse_uuid(id, what="budget")
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return await budgets.delete_budget(uow, budget_id, instances=ctx.services.instances)


async def pause_run(info: Info, id: strawberry.ID) -> Run:
    ctx = info.context
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        paused = await pauses.pause(uow, parse_run_id(id))
    (shown,) = await ctx.opened([paused])
    return Run.of(shown)


async def resume_run(
    info: Info,
    id: strawberry.ID,
    over_budget: Annotated[
        bool | None,
        strawberry.argument(
            description="A run a budget holds may finish past it (ADMIN: it spends past the "
            "budget)."
        ),
    ] = False,
) -> Run:
    ctx = info.context
    over_budget = bool(over_budget)
    if over_budget and not ctx.require_member().role.allows(Role.ADMIN):
        raise Forbidden("resumeRun(overBudget: true) spends past a budget: ADMIN only")
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        run = await pauses.resume(
            uow, parse_run_id(id), over_budget=over_budget, instances=ctx.services.instances
        )
    (shown,) = await ctx.opened([run])
    return Run.of(shown)


async def pause_agent(info: Info, agent: str) -> AgentState:
    ctx = info.context
    ctx.services.agents.require(agent)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        return AgentState.of(await pauses.pause_agent(uow, agent))


async def resume_agent(info: Info, agent: str) -> AgentState:
    ctx = info.context
    ctx.services.agents.require(agent)
    async with ctx.services.sessions.unit(ctx.tenant_id) as uow:
        state = await pauses.resume_agent(uow, agent, instances=ctx.services.instances)
    return AgentState.of(state)


async def agent_states(info: Info) -> list[AgentState]:
    ctx = info.context
    if ctx.require().is_run_reader:
        return []
    names = [a.name for a in ctx.services.agents]
    found = await pauses.agent_states(ctx.services.sessions, ctx.tenant_id, names)
    return [AgentState.of(s) for s in found]
