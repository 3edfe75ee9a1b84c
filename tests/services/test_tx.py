"""The unit of work's promise: after a commit, its nudges go out even if the caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import asyncpg
import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.raw import create_pool, prepare
from outlive.db.tx import PendingNudge, Sessions
from tests.support import TenantHandle


async def test_a_cancelled_caller_still_sends_what_its_commit_promised(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    """A worker stopping mid-step cancels its task right after a commit: the nudge still goes."""
    sink_entered, release = asyncio.Event(), asyncio.Event()
    sent: list[PendingNudge] = []

    async def slow_sink(nudges: Sequence[PendingNudge]) -> None:
        sink_entered.set()
        await release.wait()
        sent.extend(nudges)

    wired = sessions.wired(nudge_sink=slow_sink)

    async def step() -> None:
        async with wired.unit(tenant.id) as uow:
            await uow.session.execute(text("SELECT 1"))
            uow.nudge("run.updated", tenant.id)

    task = asyncio.create_task(step())
    await sink_entered.wait()
    task.cancel()  # lands while the sink is busy after the commit
    await asyncio.sleep(0)  # let the cancellation reach the task before the sink may finish
    release.set()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert [n.type for n in sent] == ["run.updated"]


async def test_a_statement_cancelled_in_flight_finishes_and_still_announces(
    sessions: Sessions, settings: Settings, tenant: TenantHandle
) -> None:
    """On the raw pool a statement commits itself: a cancellation that lands while it runs waits
    for it, the unit's nudge goes out, and only then does the caller see the cancellation."""
    assert settings.database_url is not None
    sent: list[PendingNudge] = []

    async def sink(nudges: Sequence[PendingNudge]) -> None:
        sent.extend(nudges)

    raw = await create_pool(settings.database_url, max_size=2)
    wired = Sessions(sessions.maker, sink, autocommit_maker=sessions.autocommit_maker, raw=raw)
    slow = prepare(text("SELECT pg_sleep(0.5), 'outlive-tx-test' AS marker"))
    finished: list[str] = []

    async def step() -> None:
        async with wired.unit(tenant.id, single_statement=True) as uow:
            row = await uow.fetchrow(slow)
            assert row is not None
            finished.append(row["marker"])
            uow.nudge("run.event", tenant.id)

    try:
        task = asyncio.create_task(step())
        watcher = await asyncpg.connect(settings.database_url)
        try:  # until the statement is running on the server
            while not await watcher.fetchval(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%outlive-tx-test%'"
                " AND state = 'active' AND pid <> pg_backend_pid()"
            ):
                pass
        finally:
            await watcher.close()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    finally:
        await raw.close()
    assert finished == ["outlive-tx-test"]
    assert [n.type for n in sent] == ["run.event"]
