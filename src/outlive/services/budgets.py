"""Budgets: `setBudget`, `deleteBudget`, `budgets` (contract §4.2, §7 "Budgets").

A budget caps what the runs of its scope record (model tokens and/or USD) in its period. Before
a step that expects usage starts, the expected usage is reserved against every budget that
applies (`outlive_step_gate`); a step whose reservation would pass a limit does not start. With
`PAUSE` the run is held WAITING for 'budget' and resumes by itself when there is room again: a
raised limit or a deleted budget (here, in the same transaction), a new period (its timer), or
`resumeRun(overBudget: true)`. It is never FAILED for a budget, and no recorded step is bought
again. With `CANCEL` it settles CANCELLED saying so; with `WARN` it goes on.

**The bound.** What a period records never passes its limit by more than the reservations of
the steps in flight when it was reached (a step starts only when everything recorded and
reserved, and its own expectation, fit; a step then records at most what it reserved, unless it
reported more than it expected). A killed step's reservation counts only while its attempt held
the run, so it is released when the attempt is lost.

A model with no price (neither `OUTLIVE_MODEL_PRICES` nor the maintained table has it) counts 0
USD and is named in `unpricedModels`, so an operator knows why a cost is unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any
from uuid import UUID

from sqlalchemy import text

from outlive.db.models import BudgetBreach, BudgetPeriod, BudgetScope
from outlive.db.ports import RunInstances
from outlive.db.raw import prepare
from outlive.db.records import Record
from outlive.db.tx import Db, Unit
from outlive.errors import BadUserInput, NotFound
from outlive.ids import TenantId
from outlive.services.pauses import hand_after_commit
from outlive.services.runs.holds import let_go, woken_of
from outlive.services.runs.keys import check_tags

MAX_TARGET = 200
MAX_BUDGETS = 100  # per tenant


@dataclass(frozen=True, slots=True)
class BudgetRecord(Record):
    id: UUID
    scope: BudgetScope
    target: str | None
    period: BudgetPeriod
    limit_tokens: int | None
    limit_usd: Decimal | None
    warn_at: float
    on_breach: BudgetBreach
    spent_tokens: int
    spent_usd: Decimal
    reserved_tokens: int
    period_start: datetime | None
    held_runs: int
    unpriced_models: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class BudgetSpec:
    """What `setBudget` is given (`BudgetInput`)."""

    scope: BudgetScope
    period: BudgetPeriod
    target: str | None = None
    limit_tokens: int | None = None
    limit_usd: Decimal | None = None
    warn_at: float = 0.8
    on_breach: BudgetBreach = BudgetBreach.PAUSE


# The period's record; for a run's own budget, what the runs it holds now recorded. Reserved:
# the reservations of attempts that still hold their run RUNNING.
_READ = """
SELECT b.id, b.scope, NULLIF(b.target, '') AS target, b.period, b.limit_tokens, b.limit_usd,
       b.warn_at, b.on_breach, outlive_period_start(b.period) AS period_start,
       CASE WHEN b.period = 'RUN' THEN h.spent_tokens ELSE coalesce(p.spent_tokens, 0) END
           AS spent_tokens,
       CASE WHEN b.period = 'RUN' THEN h.spent_usd ELSE coalesce(p.spent_usd, 0) END AS spent_usd,
       coalesce(p.unpriced_models, '{}') AS unpriced_models, h.held_runs,
       (SELECT coalesce(sum(v.tokens), 0) FROM budget_reservations v
          JOIN runs x ON x.id = v.run_id AND x.status = 'RUNNING' AND x.attempt = v.attempt
         WHERE v.budget_id = b.id) AS reserved_tokens
  FROM budgets b
  LEFT JOIN budget_periods p
         ON p.budget_id = b.id AND p.period_start = outlive_period_start(b.period)
  CROSS JOIN LATERAL (
      SELECT count(*) AS held_runs, coalesce(sum(s.tokens), 0) AS spent_tokens,
             coalesce(sum(s.usd), 0) AS spent_usd
        FROM runs r
        LEFT JOIN LATERAL (SELECT sum(input_tokens + output_tokens) AS tokens,
                                  sum(cost_usd) AS usd
                             FROM run_steps WHERE run_id = r.id) s ON true
       WHERE r.held_by_budget_id = b.id AND r.status = 'WAITING') h
 WHERE b.tenant_id = :tenant_id
"""
_BUDGETS = prepare(text(_READ + " ORDER BY b.created_at, b.id"))
_BUDGET = prepare(text(_READ + " AND b.id = :budget_id"))
_OLD = prepare(
    text(
        "SELECT id, limit_tokens, limit_usd, on_breach FROM budgets WHERE tenant_id = :tenant_id"
        " AND scope = :scope AND target = :target AND period = :period FOR UPDATE"
    )
)
_COUNT = prepare(text("SELECT count(*) AS n FROM budgets WHERE tenant_id = :tenant_id"))
_UPSERT = prepare(
    text(
        "INSERT INTO budgets (tenant_id, scope, target, period, limit_tokens, limit_usd,"
        " warn_at, on_breach) VALUES (:tenant_id, :scope, :target, :period, :limit_tokens,"
        " CAST(:limit_usd AS numeric), :warn_at, :on_breach)"
        " ON CONFLICT (tenant_id, scope, target, period) DO UPDATE SET"
        " limit_tokens = excluded.limit_tokens, limit_usd = excluded.limit_usd,"
        " warn_at = excluded.warn_at, on_breach = excluded.on_breach, updated_at = now()"
        " RETURNING id"
    )
)
_DELETE = prepare(
    text("DELETE FROM budgets WHERE id = :budget_id AND tenant_id = :tenant_id RETURNING id")
)
_EXISTS = prepare(
    text("SELECT id FROM budgets WHERE id = :budget_id AND tenant_id = :tenant_id FOR UPDATE")
)


async def list_budgets(db: Db, tenant_id: TenantId) -> list[BudgetRecord]:
    return [BudgetRecord.from_row(r) for r in await db.all(_BUDGETS, tenant_id=tenant_id)]


async def read_budget(db: Db, tenant_id: TenantId, budget_id: UUID) -> BudgetRecord:
    row = await db.one(_BUDGET, tenant_id=tenant_id, budget_id=budget_id)
    if row is None:
        raise NotFound(f"budget {budget_id} not found")
    return BudgetRecord.from_row(row)


def check_spec(spec: BudgetSpec) -> BudgetSpec:
    """The spec, or `BadUserInput` (nothing written)."""
    if (spec.scope is BudgetScope.RUN) != (spec.period is BudgetPeriod.RUN):
        raise BadUserInput("a RUN budget has the period RUN, and only it has")
    needs_target = spec.scope in (BudgetScope.AGENT, BudgetScope.TAG)
    if needs_target != (spec.target is not None):
        raise BadUserInput("an AGENT or TAG budget names its target; the others name none")
    if spec.target is not None and not 1 <= len(spec.target) <= MAX_TARGET:
        raise BadUserInput(f"a budget's target is 1 to {MAX_TARGET} characters")
    if spec.scope is BudgetScope.TAG:
        check_tags([spec.target or ""])
    if spec.limit_tokens is None and spec.limit_usd is None:
        raise BadUserInput("a budget limits tokens, USD, or both")
    if spec.limit_tokens is not None and not 0 < spec.limit_tokens <= 10**15:
        raise BadUserInput("limitTokens is a positive whole number")
    if spec.limit_usd is not None and not (0 < spec.limit_usd <= 10**9):
        raise BadUserInput("limitUsd is a positive amount (at most 1e9)")
    if not 0 <= spec.warn_at <= 1:
        raise BadUserInput("warnAt is 0 to 1")
    return spec


async def set_budget(uow: Unit, spec: BudgetSpec, *, instances: RunInstances) -> BudgetRecord:
    """Create the budget of (scope, target, period), or update it. Runs it holds resume when it
    has more room now (a raised limit, or no longer PAUSE); each is held again at its gate if
    it still does not fit."""
    tenant_id = TenantId(uow.require_tenant())
    spec = check_spec(spec)
    key = {
        "tenant_id": tenant_id,
        "scope": spec.scope.value,
        "target": spec.target or "",
        "period": spec.period.value,
    }
    old = await uow.one(_OLD, **key)
    if old is None and (await uow.one(_COUNT, tenant_id=tenant_id) or {"n": 0})["n"] >= MAX_BUDGETS:
        raise BadUserInput(f"a tenant has at most {MAX_BUDGETS} budgets")
    row = await uow.one(
        _UPSERT,
        **key,
        limit_tokens=spec.limit_tokens,
        limit_usd=None if spec.limit_usd is None else str(spec.limit_usd),
        warn_at=spec.warn_at,
        on_breach=spec.on_breach.value,
    )
    assert row is not None  # noqa: S101 (an upsert returns its row)
    budget_id = UUID(str(row["id"]))
    if old is not None and _more_room(old, spec):
        moved = await let_go(uow, tenant_id, which="budget", budget_id=budget_id)
        hand_after_commit(uow, woken_of(moved), instances)
    uow.nudge("budget.updated", budget_id)
    return await read_budget(uow, tenant_id, budget_id)


def _more_room(before: Mapping[str, Any], spec: BudgetSpec) -> bool:
    raised_tokens = spec.limit_tokens is None or (
        before["limit_tokens"] is not None and spec.limit_tokens > before["limit_tokens"]
    )
    raised_usd = spec.limit_usd is None or (
        before["limit_usd"] is not None and spec.limit_usd > before["limit_usd"]
    )
    return spec.on_breach is not BudgetBreach.PAUSE or raised_tokens or raised_usd


async def delete_budget(uow: Unit, budget_id: UUID, *, instances: RunInstances) -> bool:
    """Delete the tenant's budget; the runs it held resume. NOT_FOUND for another's."""
    tenant_id = TenantId(uow.require_tenant())
    if await uow.one(_EXISTS, budget_id=budget_id, tenant_id=tenant_id) is None:
        raise NotFound(f"budget {budget_id} not found")
    moved = await let_go(uow, tenant_id, which="budget", budget_id=budget_id)
    hand_after_commit(uow, woken_of(moved), instances)
    await uow.execute(_DELETE, budget_id=budget_id, tenant_id=tenant_id)
    uow.nudge("budget.updated", budget_id)
    return True
