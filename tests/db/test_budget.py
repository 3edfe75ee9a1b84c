"""The connection budget: each pool is sized by its setting; behind PgBouncer in transaction mode
(no prepared statements across server connections), OUTLIVE_DB_PGBOUNCER=1 makes everything work.

The PgBouncer fixture (`bounced`) is in tests/db/conftest.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import asyncpg
import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.runtime import open_runtime
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

pytestmark = pytest.mark.timeout(180)


async def test_each_pool_is_sized_by_its_setting(servers: Servers) -> None:
    settings = make_settings(servers, db_pool_size=2, db_max_overflow=1, db_raw_pool_size=3)
    assert settings.database_url is not None
    async with open_runtime(settings, "worker") as runtime:
        engine, sessions = runtime.engine, runtime.sessions
        pool: Any = engine.sync_engine.pool
        assert (pool.size(), pool._max_overflow) == (2, 1)
        assert sessions.raw is not None
        assert sessions.raw.get_max_size() == 3
        held = [await engine.connect() for _ in range(3)]  # size + overflow: all there is
        with pytest.raises(TimeoutError):
            async with asyncio.timeout(0.5):
                await engine.connect()
        for conn in held:
            await conn.close()


async def test_a_burst_wider_than_the_pool_reuses_its_connections(servers: Servers) -> None:
    """With the defaults, a process under a burst opens no connection per checkout: every one it
    opens stays in the pool. (With 5 kept open and 5 of overflow, the overflow ones were closed
    as they came back, so each burst opened them again: 25 connections over these 4 bursts.)"""
    settings = make_settings(servers)
    async with open_runtime(settings, "worker") as runtime:
        engine = runtime.engine
        budget = settings.db_pool_size + settings.db_max_overflow

        async def one() -> int:
            async with engine.connect() as conn:
                # held on the server for a moment, so that the burst needs the whole pool
                pid = await conn.scalar(text("SELECT pg_backend_pid() FROM pg_sleep(0.02)"))
                assert isinstance(pid, int)
                return pid

        pids: set[int] = set()
        for _ in range(4):
            pids |= set(await asyncio.gather(*(one() for _ in range(3 * budget))))
    assert len(pids) <= budget


async def test_everything_works_behind_pgbouncer_in_transaction_mode(
    bounced: Settings, sessions: Any, tenant: TenantHandle
) -> None:
    assert bounced.redis_url is not None
    async with Api.running(bounced) as api, NudgeWatch(bounced.redis_url, sessions, tenant.id) as w:
        host = WorkerHost(bounced, concurrency=8)
        await host.start()
        try:
            # concurrent single statements (raw pool), transactions and reads (sessions)
            started = await asyncio.gather(
                *(
                    api.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0})
                    for _ in range(4)
                ),
                *(
                    api.gql("{ runs(first: 5) { edges { cursor } } }", token=tenant.token)
                    for _ in range(8)
                ),
            )
            run_id = started[0]["run"]["id"]
            run = await w.until(run_id, settled)
            listed = await api.gql(
                "{ runs(first: 50) { edges { node { id status } } } }", token=tenant.token
            )
            usage = await api.gql("{ usage(days: 1) { count } }", token=tenant.token)
        finally:
            await host.stop()
    assert run.status.value == "SUCCEEDED"
    assert any(e["node"]["id"] == run_id for e in listed["runs"]["edges"])
    assert sum(u["count"] for u in usage["usage"]) >= 1


async def test_without_the_setting_pgbouncer_breaks_prepared_statements(
    bounced: Settings,
) -> None:
    """The check behind the setting: asyncpg's default statement cache fails through it. Eight
    client connections over PgBouncer's four server connections, each query holding its server
    for a moment, so that they overlap and a statement prepared on one server runs on another.
    (Instant queries on a loaded machine ran one at a time, each on the server PgBouncer had
    just released, where every statement had been prepared: none failed, in one CI-like run.)"""
    assert bounced.database_url is not None
    pool = await asyncpg.create_pool(bounced.database_url, min_size=8, max_size=8)
    failures = 0

    async def one(i: int) -> None:
        nonlocal failures
        try:
            await pool.fetchval("SELECT $1::int + 1 FROM pg_sleep(0.005)", i)
        except asyncpg.PostgresError:
            failures += 1

    try:
        await asyncio.gather(*(one(i) for i in range(200)))
    finally:
        await pool.close()
    assert failures > 0
