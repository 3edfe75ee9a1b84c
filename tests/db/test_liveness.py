"""A free liveness lock means "worker gone" only on the server where its holder took it
(`outlive.db.liveness.taken_here`, docs/liveness.md). A failover or a restart loses every lock:
until a live worker has taken its lock again on the new primary, neither the relay nor a claim
may take its runs. Here the old primary is played by the record of where the lock was taken
(`liveness_locks`), moved to another server life; `tests/db/test_postgres_restart.py` restarts a
real server, and `tests/db/test_failover.py` fails a Patroni cluster over."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable

import asyncpg
import pytest

from outlive.db.engine import create_engine, create_sessions
from outlive.db.liveness import DeathWatch, Liveness, worker_gone
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.services.relay.queries import ORPHANED
from outlive.services.runs import claim_run
from tests.conftest import new_tenant
from tests.support import Servers
from tests.workflows.test_claim import new_run

GONE = f"SELECT {worker_gone('CAST($1 AS integer)')}"
LEASE_S = 30.0  # live throughout: only liveness can hand the run


@pytest.fixture
async def database(servers: Servers) -> str:
    return await servers.clone()  # its liveness_locks are this test's alone


@pytest.fixture
async def own(database: str) -> AsyncIterator[tuple[Sessions, asyncpg.Connection]]:
    engine = create_engine(database)
    conn = await asyncpg.connect(database)
    yield create_sessions(engine), conn
    await conn.close()
    await engine.dispose()


async def until(check: Callable[[], Awaitable[bool]]) -> None:
    """A worker's reconnect announces nothing: look every 50 ms, for at most 10 s."""
    async with asyncio.timeout(10):
        while not await check():  # noqa: ASYNC110 (PostgreSQL's locks: no event to await)
            await asyncio.sleep(0.05)


async def held_by(sessions: Sessions, conn: asyncpg.Connection, key: int) -> RunId:
    tenant = await new_tenant(sessions)
    run_id = await new_run(sessions, tenant)
    async with sessions.unit() as uow:
        assert await claim_run(uow, run_id, lease_s=LEASE_S, worker_id=key) is not None
    return run_id


async def test_a_lock_lost_with_the_old_server_hands_nothing_until_its_holder_is_back(
    database: str, own: tuple[Sessions, asyncpg.Connection]
) -> None:
    sessions, conn = own
    worker = Liveness(database)
    await worker.start()
    try:
        key = worker.worker_id
        assert key is not None
        run_id = await held_by(sessions, conn, key)
        assert await conn.fetchval(GONE, key) is False  # held

        # The server the lock was taken on is gone (the record is of another server life), and
        # so is the lock: the worker lives and is reconnecting.
        pid = await conn.fetchval(
            "UPDATE liveness_locks SET server_started_at = server_started_at - interval '1 hour'"
            " WHERE worker_id = $1 RETURNING (SELECT pid FROM pg_locks WHERE locktype ="
            " 'advisory' AND objid = CAST($1 AS oid) AND objsubid = 2 AND granted)",
            key,
        )
        assert pid is not None
        await conn.execute("SELECT pg_terminate_backend($1)", pid)
        assert await conn.fetchval(GONE, key) is False  # free here, but never taken here
        assert await sessions.all(ORPHANED, batch=10) == []  # the relay hands nothing
        async with sessions.unit() as uow:  # nor may any delivery claim it
            assert await claim_run(uow, run_id, lease_s=LEASE_S, worker_id=None) is None

        # Back by itself, with the same key: taken here now, and held.
        await until(lambda: _taken_here(conn, key))
        assert worker.worker_id == key
        assert await conn.fetchval(GONE, key) is False
    finally:
        await worker.stop()
    # Now it is gone for real: its lock is free where it took it (once its session ended).
    await until(lambda: _gone(conn, key))
    assert [r["id"] for r in await sessions.all(ORPHANED, batch=10)] == [run_id]
    async with sessions.unit() as uow:
        taken = await claim_run(uow, run_id, lease_s=LEASE_S, worker_id=None)
    assert taken is not None
    assert taken.attempt == 2


async def _gone(conn: asyncpg.Connection, key: int) -> bool:
    return bool(await conn.fetchval(GONE, key))


async def _taken_here(conn: asyncpg.Connection, key: int) -> bool:
    return bool(
        await conn.fetchval(
            "SELECT EXISTS (SELECT 1 FROM liveness_locks WHERE worker_id = $1"
            " AND server_started_at = pg_postmaster_start_time())",
            key,
        )
    )


async def test_taking_a_lock_prunes_the_records_that_decide_nothing(
    database: str, own: tuple[Sessions, asyncpg.Connection]
) -> None:
    """Records of another server life, and of gone workers that hold no RUNNING run, go; a gone
    worker's record stays while it holds a run (the relay still has to hand it)."""
    sessions, conn = own
    holding = await held_by(sessions, conn, 3)
    await conn.execute(
        "INSERT INTO liveness_locks (worker_id, server_started_at) VALUES"
        " (1, pg_postmaster_start_time() - interval '1 hour'),"  # another server life
        " (2, pg_postmaster_start_time()), (3, pg_postmaster_start_time())"  # gone; 3 holds a run
    )
    worker = Liveness(database)
    await worker.start()
    try:
        kept = {r["worker_id"] for r in await conn.fetch("SELECT worker_id FROM liveness_locks")}
        assert kept == {3, worker.worker_id}
        assert [r["id"] for r in await sessions.all(ORPHANED, batch=10)] == [holding]
    finally:
        await worker.stop()


async def test_a_worker_alone_looks_for_a_gone_worker_s_runs_once_a_neighbour_look(
    database: str,
) -> None:
    """Alone in its database, a worker's death watch lets the relay look for a gone worker's
    runs once per look for a neighbour (`DeathWatch.ALONE_S`), not on every shorter `within`:
    those looks are the only ones that can find anything (bench/cells.py paid them per cell)."""
    liveness = Liveness(database)
    await liveness.start()
    watch = liveness.watch()
    try:
        loop = asyncio.get_running_loop()
        began = loop.time()
        for _ in range(3):  # as the relay's look loop, with OUTLIVE_LIVENESS_CHECK_S = 0.05
            assert not await watch.death(within=0.05)
        assert loop.time() - began >= 2 * DeathWatch.ALONE_S  # the first looks at once
    finally:
        await watch.stop()
        await liveness.stop()


async def test_the_liveness_session_prepares_its_look_once(database: str) -> None:
    """The look for a neighbour is a statement prepared once on the liveness session: not a
    parse and then an execute on every look (two round trips each, twice a second per cell)."""
    liveness = Liveness(database)
    await liveness.start()
    watch = liveness.watch()
    try:
        for _ in range(2):
            await watch.death(within=0.01)
        conn = liveness.connection
        assert conn is not None
        prepared = await conn.fetch("SELECT statement FROM pg_prepared_statements")
        assert any("pg_locks" in r["statement"] for r in prepared)
    finally:
        await watch.stop()
        await liveness.stop()


async def test_a_worker_alone_is_told_by_its_own_look_whether_a_gone_worker_left_runs(
    database: str, own: tuple[Sessions, asyncpg.Connection]
) -> None:
    """A worker alone in its cell asks, in its one look a second for a neighbour, whether a gone
    worker left a RUNNING run: the relay then makes its own look (and hands them) only when one
    did, not a second statement every second."""
    sessions, conn = own
    alone, other = Liveness(database), Liveness(database)
    await alone.start()
    await other.start()
    assert other.worker_id is not None
    run_id = await held_by(sessions, conn, other.worker_id)
    await other.stop()  # its process is gone: its run is left RUNNING
    watch = alone.watch()
    try:
        assert not await watch.death(within=0.05)
        assert watch.may_have_orphans()
        await conn.execute("UPDATE runs SET status = 'SUCCEEDED' WHERE id = $1", run_id)
        assert not await watch.death(within=0.05)
        assert not watch.may_have_orphans()  # the look saw none: the relay need not look
    finally:
        await watch.stop()
        await alone.stop()
