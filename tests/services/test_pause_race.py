"""A resume that races a run's step gate never leaves the run held (contract §7 "Pauses").

The gate (`outlive_step_gate`) parks a RUNNING run of a paused tenant (or agent) at its next
step; a resume updates the tenant (or deletes the agent's pause) and wakes the held runs, in one
transaction. Here the gate's transaction has parked the run and not yet committed when the
resume runs: the gate confirmed the pause under a lock, so the resume waits for the park and
then wakes it. Read unlocked (before migration 0049), the resume did not wait, its wake did not
see the run, and the run stayed WAITING for 'pause' on a resumed tenant for good (found moving
tenants between cells, whose move resumes the tenant on the target)."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest

from outlive.db.ports import NO_INSTANCES
from outlive.db.tx import Sessions
from outlive.services import pauses
from tests.conftest import _asyncpg_dsn
from tests.support import Servers, TenantHandle

GATE = "SELECT verdict FROM outlive_step_gate($1, 1, 'turn', 1, 0, 0)"
WAITING_ON_A_LOCK = (
    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
    " AND datname = current_database()"
)


async def resumed_or_blocked(admin: asyncpg.Connection, resume: asyncio.Task[object]) -> None:
    """Until the resume finished or waits on a lock (a poll: PostgreSQL announces neither)."""
    while not resume.done() and not await admin.fetchval(WAITING_ON_A_LOCK):  # noqa: ASYNC110
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("by", ["tenant", "agent"])
async def test_a_resume_during_a_park_wakes_the_run(
    by: str, servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    admin = await asyncpg.connect(_asyncpg_dsn(servers.database_url))
    gate = await asyncpg.connect(_asyncpg_dsn(servers.database_url))
    try:
        run_id = await admin.fetchval(
            "INSERT INTO runs (tenant_id, agent, input, status, attempt)"
            " VALUES ($1, 'demo', '{}', 'RUNNING', 1) RETURNING id",
            tenant.id,
        )
        if by == "tenant":  # paused after the run's claim: the gate is what holds it
            await admin.execute("UPDATE tenants SET paused_at = now() WHERE id = $1", tenant.id)
        else:
            await admin.execute(
                "INSERT INTO agent_pauses (tenant_id, agent) VALUES ($1, 'demo')", tenant.id
            )
        parking = gate.transaction()
        await parking.start()
        assert await gate.fetchval(GATE, run_id) == "paused"  # parked, not committed

        async def resume() -> None:
            async with sessions.unit(tenant.id) as uow:
                if by == "tenant":
                    await pauses.pause_tenant(
                        uow, tenant.principal.tenant.slug, paused=False, instances=NO_INSTANCES
                    )
                else:
                    await pauses.resume_agent(uow, "demo", instances=NO_INSTANCES)

        resuming = asyncio.create_task(resume())
        await resumed_or_blocked(admin, resuming)
        await parking.commit()
        await resuming
        row = await admin.fetchrow("SELECT status, waiting_for FROM runs WHERE id = $1", run_id)
        assert (row["status"], row["waiting_for"]) == ("QUEUED", None)  # woken, not held
    finally:
        await gate.close()
        await admin.close()
