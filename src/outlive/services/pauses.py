"""Pauses: `pauseRun`, `resumeRun`, `pauseAgent`, `resumeAgent`, `agentStates`, and `outlive
tenant pause|resume` (contract §7 "Pauses").

A pause holds a run: QUEUED or WAITING at once, RUNNING at its next step (the step in flight
completes and is recorded); a held run is WAITING for 'pause' and holds no worker and no slot of
its tenant's cap. `pauseAgent` and a tenant's pause hold every run of theirs and every new one
(a new run is held at its first step's gate). Everything is in PostgreSQL, so a pause survives
Redis being emptied. The moves are `services.runs.holds`'; this module scopes them to the tenant
and hands the runs they wake to the queue after the commit.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from outlive.db.ports import RunInstances
from outlive.db.tx import Db, Unit
from outlive.errors import BadUserInput, NotFound
from outlive.ids import RunId, TenantId
from outlive.services import relay
from outlive.services.runs import RunRecord, read_run
from outlive.services.runs import hold_queries as queries
from outlive.services.runs.holds import let_go, pause_all, pause_run, woken_of
from outlive.services.tenants import check_slug


@dataclass(frozen=True, slots=True)
class AgentState:
    agent: str
    paused: bool
    paused_at: datetime | None


def hand_after_commit(uow: Unit, woken: Sequence[RunRecord], instances: RunInstances) -> None:
    """After the commit, the woken runs go to the queue (or wait for a slot, if not admitted)."""
    if not woken:
        return
    rows = [
        {"id": r.id, "tenant_id": r.tenant_id, "admitted": r.dispatched_at is not None}
        for r in woken
    ]

    async def hand() -> None:
        await relay.hand_woken(uow.sessions, instances, rows)

    uow.after_commit(hand)


async def pause(uow: Unit, run_id: RunId) -> RunRecord:
    """Hold the unit's tenant's run (idempotent; a settled run comes back unchanged)."""
    tenant_id = TenantId(uow.require_tenant())
    paused = await pause_run(uow, tenant_id, run_id)
    return paused or await _existing(uow, tenant_id, run_id)


async def resume(
    uow: Unit, run_id: RunId, *, over_budget: bool, instances: RunInstances
) -> RunRecord:
    """Let the run go (whoever paused it); `over_budget`: a run a budget holds goes on past it.
    A run a budget holds, resumed without `over_budget`, is BAD_USER_INPUT (nothing changed)."""
    tenant_id = TenantId(uow.require_tenant())
    moved = await let_go(uow, tenant_id, which="run", run_id=run_id, over_budget=over_budget)
    hand_after_commit(uow, woken_of(moved), instances)
    if moved:
        return moved[0]
    run = await _existing(uow, tenant_id, run_id)
    if run.held_by_budget_id is not None and run.waiting_for == "budget":
        raise BadUserInput(
            f"budget {run.held_by_budget_id} holds this run: raise or delete the budget, or"
            " resume it with overBudget: true to let it finish past the budget"
        )
    return run


async def _existing(uow: Unit, tenant_id: TenantId, run_id: RunId) -> RunRecord:
    run = await read_run(uow, tenant_id, run_id)
    if run is None:
        raise NotFound(f"run {run_id} not found")
    return run


async def pause_agent(uow: Unit, agent: str) -> AgentState:
    """Hold the agent's runs of this tenant, and every new one."""
    tenant_id = TenantId(uow.require_tenant())
    await uow.execute(queries.PAUSE_AGENT, tenant_id=tenant_id, agent=agent)
    await pause_all(uow, tenant_id, by="agent", agent=agent)
    return next(s for s in await agent_states(uow, tenant_id, [agent]))


async def resume_agent(uow: Unit, agent: str, *, instances: RunInstances) -> AgentState:
    """Let go of the runs the agent's pause held (a run paused on its own stays held)."""
    tenant_id = TenantId(uow.require_tenant())
    await uow.execute(queries.RESUME_AGENT, tenant_id=tenant_id, agent=agent)
    moved = await let_go(uow, tenant_id, which="agent", agent=agent)
    hand_after_commit(uow, woken_of(moved), instances)
    return AgentState(agent, paused=False, paused_at=None)


async def agent_states(db: Db, tenant_id: TenantId, agents: Sequence[str]) -> list[AgentState]:
    """Each of `agents` with its pause in this tenant."""
    paused = {
        r["agent"]: r["paused_at"] for r in await db.all(queries.AGENT_PAUSES, tenant_id=tenant_id)
    }
    return [AgentState(a, a in paused, paused.get(a)) for a in agents]


async def pause_tenant(uow: Unit, slug: str, *, paused: bool, instances: RunInstances) -> int:
    """`outlive tenant pause|resume SLUG`: hold (or let go of) every run of the tenant; how many
    runs were held or let go."""
    row = await uow.one(queries.PAUSE_TENANT, slug=check_slug(slug), paused=paused)
    if row is None:
        raise NotFound(f"no tenant {slug!r}")
    tenant_id = TenantId(row["id"])
    uow.tenant_id = tenant_id
    if paused:
        return await pause_all(uow, tenant_id, by="tenant", agent=None)
    moved = await let_go(uow, tenant_id, which="tenant")
    hand_after_commit(uow, woken_of(moved), instances)
    return len(moved)
