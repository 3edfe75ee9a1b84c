"""Starting runs: the partial unique index hands back the active run, under a race too."""

from __future__ import annotations

import asyncio
import statistics
import time

from sqlalchemy import func, select

from outlive.db.models import Run
from outlive.db.tx import Sessions
from tests.support import Api, NudgeWatch, TenantHandle


async def _count_runs(sessions: Sessions, tenant: TenantHandle) -> int:
    stmt = select(func.count().label("n")).select_from(Run).where(Run.tenant_id == tenant.id)
    row = await sessions.one(stmt)
    assert row is not None
    return int(row["n"])


async def test_fifty_concurrent_starts_make_one_run(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, sessions: Sessions
) -> None:
    other = await api.start_run(other_tenant.token, "demo", {"turns": 1})
    results = await asyncio.gather(*(api.start_run(tenant.token, "demo") for _ in range(50)))

    ids = {r["run"]["id"] for r in results}
    assert len(ids) == 1
    assert sorted(r["created"] for r in results) == [False] * 49 + [True]
    assert await _count_runs(sessions, tenant) == 1
    assert other["run"]["id"] not in ids
    again = await api.start_run(other_tenant.token, "demo")
    assert again == {"created": False, "run": other["run"]}


async def test_another_agent_and_a_settled_run_do_not_block_a_start(
    api: Api, tenant: TenantHandle
) -> None:
    first = await api.start_run(tenant.token, "demo")
    llm = await api.start_run(tenant.token, "llm", {"prompt": "hi"})
    assert llm["created"] is True
    cancelled = await api.cancel(tenant.token, first["run"]["id"])
    assert cancelled["status"] == "CANCELLED"
    second = await api.start_run(tenant.token, "demo")
    assert second["created"] is True
    assert second["run"]["id"] != first["run"]["id"]


async def test_start_run_does_not_wait_for_the_agent(
    api: Api,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    worker: object,
    sessions: Sessions,
    settings: object,
) -> None:
    """A 60 s agent and a 0 s agent answer alike: the request only writes and enqueues."""

    async def timed_start(handle: TenantHandle, delay_ms: int) -> tuple[float, str]:
        begun = time.perf_counter()
        started = await api.start_run(handle.token, "demo", {"turns": 1, "delayMs": delay_ms})
        return time.perf_counter() - begun, started["run"]["id"]

    slow, fast = [], []
    for _ in range(5):
        elapsed, slow_id = await timed_start(tenant, 60_000)
        slow.append(elapsed)
        await api.cancel(tenant.token, slow_id)
        elapsed, _ = await timed_start(other_tenant, 0)
        fast.append(elapsed)
    # The slow agent sleeps a minute; an answer that waited for it could not come back in 5 s.
    assert max(slow) < 5
    assert statistics.median(slow) < statistics.median(fast) * 3 + 0.05
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:  # type: ignore[attr-defined]
        run = await watch.until(slow_id, lambda r: not r.is_active)
    assert run.status == "CANCELLED"
