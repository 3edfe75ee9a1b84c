"""A tenant's dispatch reads its own picks, whatever PostgreSQL's statistics say (issue 26).

A flood written at once is invisible to the planner until autovacuum's next ANALYZE. The old
`outlive_dispatch_runs` was planned, on such statistics, as a scan of every tenant's waiting runs
with its LIMIT subquery run again for each of them: one quiet tenant's dispatch read thousands of
the noisy tenant's rows (migration 0026 has the figures)."""

from __future__ import annotations

from uuid import UUID

import asyncpg
import pytest

from outlive.ids import TenantId
from tests.conftest import new_tenant
from tests.services.conftest import World

FLOOD = 2000
READ_BY_THIS_TRANSACTION = (
    "SELECT coalesce(idx_tup_fetch, 0) + coalesce(seq_tup_read, 0)"
    " FROM pg_stat_xact_user_tables WHERE relname = 'runs'"
)


async def waiting(
    conn: asyncpg.Connection, tenant: TenantId, count: int, first: int = 1
) -> list[UUID]:
    """`count` runs of `tenant` written waiting (not dispatched), of the agents `many-<first>`
    on; their ids."""
    rows = await conn.fetch(
        "INSERT INTO runs (tenant_id, agent, input)"
        " SELECT $1, 'many-' || i, '{}' FROM generate_series($3::int, $3::int + $2 - 1) i"
        " RETURNING id",
        tenant,
        count,
        first,
    )
    return [r["id"] for r in rows]


@pytest.mark.parametrize("quiet_waiting", [1, 0])
async def test_a_dispatch_reads_no_other_tenants_waiting_runs_on_stale_statistics(
    world: World,
    quiet_waiting: int,
) -> None:
    """Statistics taken while `runs` was empty, then 2,000 runs of one tenant waiting: another
    tenant's dispatch admits its own waiting run (or finds none) and reads a handful of rows."""
    noisy = await new_tenant(world.sessions, "flood")
    quiet = await new_tenant(world.sessions, "quiet")
    conn = await asyncpg.connect(world.database_url)
    try:
        await conn.execute("ALTER TABLE runs SET (autovacuum_enabled = off)")  # its own database
        await conn.execute("ANALYZE runs")
        await waiting(conn, noisy.id, FLOOD)
        mine = await waiting(conn, quiet.id, quiet_waiting)
        async with conn.transaction():
            admitted = await conn.fetch("SELECT outlive_dispatch_runs($1, 10) AS id", quiet.id)
            read = await conn.fetchval(READ_BY_THIS_TRANSACTION)
    finally:
        await conn.close()
    assert sorted(r["id"] for r in admitted) == sorted(mine)
    assert read <= 10, f"one dispatch of the quiet tenant read {read} rows of `runs`"


async def test_a_tenant_whose_tenant_budget_holds_a_run_is_admitted_one_at_a_time(
    world: World,
) -> None:
    """Issue 42: each run would be held at its first step by the same spent budget, so the
    dispatch admits one at a time while it holds one (not the cap: ten workers parking runs),
    and the cap again once nothing is held. An agent's budget holding a run changes nothing."""
    tenant = await new_tenant(world.sessions, "held")
    conn = await asyncpg.connect(world.database_url)
    try:
        budgets = {}
        for scope, target in (("TENANT", ""), ("AGENT", "many-0")):
            budgets[scope] = await conn.fetchval(
                "INSERT INTO budgets (tenant_id, scope, target, period, limit_tokens)"
                " VALUES ($1, $2, $3, 'DAY', 10) RETURNING id",
                tenant.id,
                scope,
                target,
            )
        (held,) = await waiting(conn, tenant.id, 1, first=0)
        hold = "UPDATE runs SET status = 'WAITING', waiting_for = 'budget', held_by_budget_id = $2"
        await conn.execute(f"{hold} WHERE id = $1", held, budgets["AGENT"])
        await waiting(conn, tenant.id, 30)
        admit = "SELECT outlive_dispatch_runs($1, 5) AS id"
        assert len(await conn.fetch(admit, tenant.id)) == 5  # an agent's hold: the cap
        done = "UPDATE runs SET status = 'SUCCEEDED' WHERE tenant_id = $1 AND dispatched_at < now()"
        await conn.execute(done, tenant.id)
        await conn.execute(f"{hold} WHERE id = $1", held, budgets["TENANT"])
        assert len(await conn.fetch(admit, tenant.id)) == 1  # the tenant's: one at a time
        assert await conn.fetch(admit, tenant.id) == []  # that one is in flight
        await conn.execute(
            "UPDATE runs SET status = 'QUEUED', waiting_for = NULL, held_by_budget_id = NULL"
            " WHERE id = $1",
            held,
        )
        assert len(await conn.fetch(admit, tenant.id)) == 4  # woken: the cap again
    finally:
        await conn.close()
