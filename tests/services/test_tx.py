"""The unit of work's promise: after a commit, its nudges go out even if the caller is cancelled."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import pytest
from sqlalchemy import text

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
