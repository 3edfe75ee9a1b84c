"""`UsageDay`: runs per UTC day, agent and status (contract §4)."""

from __future__ import annotations

import strawberry

from outlive.db.models import RunStatus as DbRunStatus
from outlive.schema.runs import RunStatus
from outlive.services.usage import AgentStats as AgentStatsRecord
from outlive.services.usage import UsageDay as UsageRecord
from outlive.services.usage_tokens import UsageTokensDay as TokensRecord


@strawberry.type
class UsageDay:
    day: str = strawberry.field(description="YYYY-MM-DD, UTC")
    agent: str
    status: RunStatus  # type: ignore[valid-type]
    count: int

    @classmethod
    def of(cls, u: UsageRecord) -> UsageDay:
        return cls(day=u.day, agent=u.agent, status=DbRunStatus(u.status), count=u.count)


@strawberry.type(description="One agent's runs created in the last `hours` (agentStats).")
class AgentStats:
    agent: str
    hours: int
    runs: int = strawberry.field(description="Runs created in the window, any status.")
    succeeded: int
    failed: int
    cancelled: int
    p50_duration_ms: float | None = strawberry.field(
        description="Median started-to-finished time of the window's succeeded runs, in ms."
    )

    @classmethod
    def of(cls, a: AgentStatsRecord) -> AgentStats:
        return cls(
            agent=a.agent,
            hours=a.hours,
            runs=a.runs,
            succeeded=a.succeeded,
            failed=a.failed,
            cancelled=a.cancelled,
            p50_duration_ms=a.p50_duration_ms,
        )


@strawberry.type(description="Model tokens and cost per UTC day and agent (usageTokens).")
class UsageTokensDay:
    day: str = strawberry.field(description="YYYY-MM-DD, UTC: when the steps completed")
    agent: str
    input_tokens: int
    output_tokens: int
    cost_usd: float | None = strawberry.field(
        description="USD, from the genai-prices table, for the models it prices (the others "
        "are in `unpricedModels`); null when it priced none."
    )
    unpriced_models: list[str] = strawberry.field(
        default_factory=list, description="Models whose usage has no price (counted 0 USD)."
    )

    @classmethod
    def of(cls, u: TokensRecord) -> UsageTokensDay:
        cost = None if u.cost_usd is None else float(u.cost_usd)
        return cls(
            day=u.day,
            agent=u.agent,
            input_tokens=u.input_tokens,
            output_tokens=u.output_tokens,
            cost_usd=cost,
            unpriced_models=list(u.unpriced_models),
        )
