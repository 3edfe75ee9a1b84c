"""`outlive replay --live-from STEP`: evals from production (issue 43).

A recorded run is replayed as `workflows.replay` does until its code first asks for the step
`STEP`; from there on every step runs for real, with the real model, in this process: the
earlier steps still answer from the journal. Nothing is written anywhere: the original run, its
journal, its timeline and its usage are untouched (the events a step emits and the streams it
writes go nowhere; its model usage is counted here only). The run's new output is printed beside
the old one.

It respects the tenant's **rate limits** (a step's `limit=` is taken from the named limits in
Redis, as a worker takes it, when Redis is configured) and its **budgets**: before each live
step, every budget that applies to the run (its tenant, its agent, its tags; not a RUN budget)
must have room left, counting what this replay spent so far; else the replay stops there
(read only: the budget's period is not charged, so a replay never holds a production run).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from decimal import Decimal
from typing import Any, cast

import httpx

from outlive.agents.policy import Expected, Retry
from outlive.agents.registry import AgentRegistry, RunContext
from outlive.config import Settings
from outlive.services.budgets import BudgetRecord
from outlive.services.runs.recorded import Recorded
from outlive.services.usage_tokens import usage_in
from outlive.workflows.calls import Interrupts, Limits, StepPolicy, call
from outlive.workflows.replay_context import ReplayContext, Stop
from outlive.workflows.step_values import result_adapter


class _Mark:
    async def refused(self) -> None:
        return None

    async def cut(self, reason: str, *, input_tokens: int = 0, output_tokens: int = 0) -> None:
        return None


@dataclass
class Spent:
    requests: int = 0
    input_tokens: int = 0
    output_tokens: int = 0

    @property
    def tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def applies(budget: BudgetRecord, recorded: Recorded) -> bool:
    run, scope = recorded.run, budget.scope.value
    if budget.period.value == "RUN":
        return False
    return (
        scope == "TENANT"
        or (scope == "AGENT" and budget.target == run.agent)
        or (scope == "TAG" and budget.target in run.tags)
    )


class LiveContext(ReplayContext):
    """A replay that runs `live_from` and every step after it for real (see the module)."""

    def __init__(
        self,
        recorded: Recorded,
        settings: Settings,
        *,
        live_from: str,
        http: httpx.AsyncClient,
        limits: Limits | None,
        budgets: Sequence[BudgetRecord] = (),
    ) -> None:
        super().__init__(recorded, settings)
        self.http = self.public_http = http
        self.live_from = live_from
        self.live = False
        self.spent = Spent()
        self._limits = limits
        self._budgets = [b for b in budgets if applies(b, recorded)]

    def step(self, name: str, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
        policy = _policy(kwargs)  # what the worker would take out of kwargs
        if name == self.live_from:
            self.live = True
        if not self.live:
            return super().step(name, fn, *args)
        self._take(name)
        return self._run(name, fn, args, kwargs, policy)

    async def _run(
        self,
        name: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        policy: StepPolicy | None,
    ) -> Any:
        self._check_budgets(name)
        adapter = result_adapter(fn, name)
        before = self.spent.tokens
        value, reservation = await call(
            fn,
            args,
            kwargs,
            policy=policy,
            interrupts=Interrupts(),
            limits=self._limits,
            tenant_id=self.tenant_id,
            reset=lambda: None,
        )
        usage = usage_in(value) if self.spent.tokens == before else None
        if usage is not None:  # a result carrying its usage, as the worker counts it
            self.record_usage(input_tokens=usage.input_tokens, output_tokens=usage.output_tokens)
        if reservation is not None and self._limits is not None:
            await self._limits.settle(reservation, None)
        return adapter.validate_json(adapter.dump_json(value, by_alias=True))

    def _check_budgets(self, name: str) -> None:
        for budget in self._budgets:
            tokens_left = (
                None
                if budget.limit_tokens is None
                else budget.limit_tokens - budget.spent_tokens - budget.reserved_tokens
            )
            usd_left = None if budget.limit_usd is None else budget.limit_usd - budget.spent_usd
            if (tokens_left is not None and tokens_left - self.spent.tokens <= 0) or (
                usd_left is not None and usd_left <= Decimal(0)
            ):
                raise Stop(None, f"step {name}: budget {budget.id} has no room left")

    async def model_call(self, model: str | None = None) -> _Mark:
        self.spent.requests += 1
        return _Mark()

    def record_usage(
        self, *, input_tokens: int, output_tokens: int, model: str | None = None
    ) -> None:
        self.spent.input_tokens += input_tokens
        self.spent.output_tokens += output_tokens

    async def delay(self, seconds: float) -> None:
        if self.live:
            await Interrupts().pause(seconds)


_POLICY = ("retry", "timeout", "shield", "limit", "reserve", "drain")


def _policy(kwargs: dict[str, Any]) -> StepPolicy | None:
    taken = {k: kwargs.pop(k) for k in _POLICY if k in kwargs}
    reserve = taken.get("reserve")
    if isinstance(reserve, int):
        taken["reserve"] = Expected(input_tokens=reserve)
    if not any(v not in (None, False) for v in taken.values()):
        return None
    retry = taken.get("retry")
    if retry is not None and not isinstance(retry, Retry):
        raise TypeError("retry= takes a Retry")
    return StepPolicy(**taken)


@dataclass(frozen=True, slots=True)
class LiveResult:
    run_id: str
    agent: str
    status: str
    old: Any  # the run's recorded output
    new: Any  # its output now (None when it stopped or failed)
    stopped: str | None  # where it stopped before its end (a wait, a budget), or why it failed
    spent: Spent
    reached: bool  # the code asked for STEP (else nothing ran live)

    def as_json(self) -> dict[str, Any]:
        return {
            "runId": self.run_id,
            "agent": self.agent,
            "status": self.status,
            "old": self.old,
            "new": self.new,
            "stopped": self.stopped,
            "reached": self.reached,
            "requests": self.spent.requests,
            "inputTokens": self.spent.input_tokens,
            "outputTokens": self.spent.output_tokens,
        }


async def live_run(
    recorded: Recorded,
    registry: AgentRegistry,
    settings: Settings,
    *,
    live_from: str,
    http: httpx.AsyncClient,
    limits: Limits | None,
    budgets: Sequence[BudgetRecord],
) -> LiveResult:
    """Re-execute the run from `live_from` on (see the module); writes nothing."""
    run = recorded.run
    context = LiveContext(
        recorded, settings, live_from=live_from, http=http, limits=limits, budgets=budgets
    )
    new, stopped = None, None
    agent = registry.get(run.agent)
    try:
        if agent is None:
            raise LookupError(f"agent {run.agent!r} is not installed here")
        new = await agent.run(cast(RunContext, context), agent.parse(run.input))
    except Stop as stop:
        stopped = stop.diverged.verdict if stop.diverged is not None else f"stopped at {stop.where}"
    except Exception as exc:  # noqa: BLE001 (the code failed: reported beside the old output)
        stopped = f"failed: {type(exc).__name__}: {exc}"
    return LiveResult(
        str(run.id),
        run.agent,
        run.status.value,
        run.output,
        new,
        stopped,
        context.spent,
        context.live,
    )
