"""Holding a run (a pause, a budget) and letting it go (contract §7 "Budgets", "Pauses").

The transitions, from → to, and what moves them, are the table `TRANSITIONS` below (statements
in `hold_queries`, and the SQL function `outlive_step_gate`).

A held run is WAITING: it holds no worker and no slot of its tenant's cap, and a resumed one is
a new claim, not a retry (`resumes`). Nothing about a hold lives in Redis: an emptied Redis
changes nothing (the relay hands woken runs again). Letting go of runs here commits the moves;
the caller hands the woken runs to the queue after the commit (`services.pauses`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal
from uuid import UUID

from outlive.db.tx import Unit
from outlive.ids import RunId, TenantId
from outlive.services.runs import hold_queries as queries
from outlive.services.runs.admit import dispatch_after_commit
from outlive.services.runs.moves import move_run
from outlive.services.runs.records import RunRecord, to_record


@dataclass(frozen=True, slots=True)
class Transition:
    source: str  # the run's status before (and what marks it)
    event: str
    target: str
    by: str  # the statement, or the SQL function, that makes it


TRANSITIONS = (
    Transition("RUNNING", "its step's gate finds a pause", "WAITING pause", "outlive_step_gate"),
    Transition(
        "RUNNING",
        "its step's gate: a PAUSE budget its expected usage would pass",
        "WAITING budget (timer: the next period)",
        "outlive_step_gate",
    ),
    Transition(
        "RUNNING",
        "its step's gate: a CANCEL budget",
        "RUNNING, cancel requested (settles CANCELLED saying why)",
        "outlive_step_gate",
    ),
    Transition(
        "QUEUED head / WAITING",
        "pauseRun, pauseAgent, tenant pause",
        "WAITING pause",
        "PAUSE, PAUSE_ALL",
    ),
    Transition(
        "RUNNING / QUEUED behind",
        "the same",
        "marked paused_at (held at its next step)",
        "PAUSE, PAUSE_ALL",
    ),
    Transition(
        "RUNNING, marked", "parks for a sleep or a wait", "WAITING pause", "wake_queries.PARK"
    ),
    Transition(
        "WAITING pause", "resumeRun, resumeAgent, tenant resume", "QUEUED (woken)", "WAKE_HELD"
    ),
    Transition(
        "WAITING budget",
        "raised or deleted budget; resumeRun(overBudget: true)",
        "QUEUED (woken)",
        "WAKE_HELD",
    ),
    Transition(
        "WAITING budget", "its next period (its timer)", "QUEUED (woken)", "wake_queries.WAKE_DUE"
    ),
    Transition("RUNNING / QUEUED behind, marked", "a resume", "unmarked", "UNMARK"),
    Transition(
        "RUNNING",
        "its code does not reach the steps the run recorded (a deploy)",
        "WAITING version",
        "HOLD_VERSION",
    ),
    Transition("WAITING version", "resumeRun (a fix deployed)", "QUEUED (woken)", "WAKE_HELD"),
    Transition("WAITING pause / budget / version", "cancelRun", "CANCELLED", "queries.CANCEL"),
)

Verdict = Literal["go", "gone", "cancel", "paused", "held", "over"]
Pauser = Literal["run", "agent", "tenant"]


@dataclass(frozen=True, slots=True)
class Gate:
    """What a step's gate decided: `go` (its usage reserved), `gone` (the attempt no longer
    holds the run), `cancel` (a cancel was asked), `paused` / `held` (the run is WAITING now,
    held by a pause / by `budget_id`), `over` (a `CANCEL` budget: the cancel was asked)."""

    verdict: Verdict
    budget_id: UUID | None = None
    touched: list[UUID] = field(default_factory=list)  # budgets whose reservations changed
    started: datetime | None = None  # `go`: when the step started, by PostgreSQL's clock


async def gate_step(
    uow: Unit,
    run: RunRecord,
    *,
    attempt: int,
    name: str,
    occurrence: int,
    tokens: int = 0,
    usd: Decimal = Decimal(0),
) -> Gate:
    """The gate before step (`name`, `occurrence`) of `attempt` starts, in one statement (see
    `outlive_step_gate`): a hold moves the run WAITING there, and nudges."""
    row = await uow.one(
        queries.GATE,
        run_id=run.id,
        attempt=attempt,
        name=name,
        occurrence=occurrence,
        tokens=tokens,
        usd=str(usd),
    )
    assert row is not None  # noqa: S101 (the function always answers one row)
    touched = list(dict.fromkeys(row["touched"] or ()))
    gate = Gate(row["verdict"], row["budget_id"], touched, row["started"])
    if gate.verdict in ("paused", "held", "over"):
        uow.nudge("run.updated", run.id, tenant_id=run.tenant_id)
        uow.nudge("run.event", run.id, tenant_id=run.tenant_id)
    if gate.verdict in ("paused", "held"):
        dispatch_after_commit(uow, run.tenant_id)  # its slot under the cap is free now
    for budget_id in gate.touched:
        uow.nudge("budget.updated", budget_id, tenant_id=run.tenant_id)
    return gate


async def hold_version(
    uow: Unit, run: RunRecord, *, attempt: int, data: Mapping[str, Any]
) -> RunRecord | None:
    """Hold the run WAITING for 'version' (see the table), with a `version` event carrying
    `data` (where and why); None when `attempt` no longer holds it (nothing written)."""
    held = await move_run(
        uow, queries.HOLD_VERSION, run_id=run.id, attempt=attempt, data=json.dumps(dict(data))
    )
    if held is not None:
        dispatch_after_commit(uow, run.tenant_id)  # its slot under the cap is free now
    return held


async def pause_run(uow: Unit, tenant_id: TenantId, run_id: RunId) -> RunRecord | None:
    """Hold the tenant's run (see the table); None when it is settled, unknown, or already held
    by its own pause (the caller reads it back)."""
    run = await move_run(uow, queries.PAUSE, run_id=run_id, tenant_id=tenant_id, by="run")
    if run is not None and run.status.value == "WAITING":
        dispatch_after_commit(uow, tenant_id)  # a QUEUED one may have held a slot
    return run


async def pause_all(uow: Unit, tenant_id: TenantId, *, by: Pauser, agent: str | None) -> int:
    """Hold every active run of the tenant (of `agent` only, when given): how many."""
    rows = await uow.all(queries.PAUSE_ALL, tenant_id=tenant_id, agent=agent, by=by)
    for row in rows:
        uow.nudge("run.updated", row["id"], tenant_id=tenant_id)
        uow.nudge("run.event", row["id"], tenant_id=tenant_id)
    if rows:
        dispatch_after_commit(uow, tenant_id)
    return len(rows)


async def let_go(
    uow: Unit,
    tenant_id: TenantId,
    *,
    which: Literal["run", "agent", "tenant", "budget"],
    run_id: RunId | None = None,
    agent: str | None = None,
    budget_id: UUID | None = None,
    over_budget: bool = False,
) -> list[RunRecord]:
    """Let go of held runs (see the table): the runs woken (QUEUED now, to be handed to the
    queue after the commit) and those only unmarked."""
    params = {
        "tenant_id": tenant_id,
        "which": which,
        "run_id": run_id,
        "agent": agent,
        "budget_id": budget_id,
        "over_budget": over_budget,
    }
    limits = uow.limits
    woken = await uow.all(
        queries.WAKE_HELD, **params, default_cap=limits.max_running_runs, agents=limits.agents
    )
    unmarked = await uow.all(queries.UNMARK, **params)
    moved = [to_record(r) for r in (*woken, *unmarked)]
    for run in moved:
        uow.nudge("run.updated", run.id, tenant_id=tenant_id)
        uow.nudge("run.event", run.id, tenant_id=tenant_id)
    if any(r.dispatched_at is None for r in moved if r.status.value == "QUEUED"):
        dispatch_after_commit(uow, tenant_id)
    return moved


def woken_of(moved: Sequence[RunRecord]) -> list[RunRecord]:
    """Those of `moved` that were woken (QUEUED now): to hand to the queue after the commit."""
    return [r for r in moved if r.status.value == "QUEUED"]
