"""Budgets and pauses (contract §4.2): `Budget`, `BudgetInput`, `AgentState`."""

from __future__ import annotations

from datetime import datetime

import strawberry

from outlive.db.models import BudgetBreach, BudgetPeriod, BudgetScope
from outlive.services.budgets import BudgetRecord
from outlive.services.pauses import AgentState as AgentStateRecord

# strawberry.enum marks the classes themselves: the domain enums are the GraphQL ones.
strawberry.enum(BudgetScope, name="BudgetScope", description="RUN: each run on its own.")
strawberry.enum(BudgetPeriod, name="BudgetPeriod", description="UTC days and months; RUN: RUN's.")
strawberry.enum(BudgetBreach, name="BudgetBreach")


@strawberry.type
class Budget:
    id: strawberry.ID
    scope: BudgetScope
    target: str | None = strawberry.field(description="The agent (AGENT) or the tag (TAG).")
    period: BudgetPeriod
    limit_tokens: int | None = strawberry.field(description="Input + output tokens; null: none.")
    limit_usd: float | None = strawberry.field(
        description="Null: none (models without a price count 0 USD: unpricedModels)."
    )
    warn_at: float = strawberry.field(
        description="0..1: a budget.updated nudge and a `budget` event, once a period."
    )
    on_breach: BudgetBreach
    spent_tokens: int = strawberry.field(
        description="This period (RUN: summed over the runs it holds now)."
    )
    spent_usd: float
    reserved_tokens: int = strawberry.field(description="Held by steps in flight.")
    period_start: datetime | None = strawberry.field(description="Null for RUN.")
    held_runs: int = strawberry.field(description="Runs WAITING on it now.")
    unpriced_models: list[str]

    @classmethod
    def of(cls, b: BudgetRecord) -> Budget:
        return cls(
            id=strawberry.ID(str(b.id)),
            scope=b.scope,
            target=b.target,
            period=b.period,
            limit_tokens=b.limit_tokens,
            limit_usd=None if b.limit_usd is None else float(b.limit_usd),
            warn_at=b.warn_at,
            on_breach=b.on_breach,
            spent_tokens=b.spent_tokens,
            spent_usd=float(b.spent_usd),
            reserved_tokens=b.reserved_tokens,
            period_start=b.period_start,
            held_runs=b.held_runs,
            unpriced_models=list(b.unpriced_models),
        )


@strawberry.input
class BudgetInput:
    scope: BudgetScope
    period: BudgetPeriod
    target: str | None = None
    limit_tokens: int | None = None
    limit_usd: float | None = None
    warn_at: float | None = 0.8
    on_breach: BudgetBreach | None = BudgetBreach.PAUSE


@strawberry.type
class AgentState:
    agent: str
    paused: bool
    paused_at: datetime | None

    @classmethod
    def of(cls, s: AgentStateRecord) -> AgentState:
        return cls(agent=s.agent, paused=s.paused, paused_at=s.paused_at)
