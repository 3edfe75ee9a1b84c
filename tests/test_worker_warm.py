"""A worker says when its start-up is over: the agents' modules imported (`Agent.warm`) and what
they made frozen. Until then a thread of its start-up shares the process with its loop, which a
latency measurement waits out (`bench/fairness.py` waits for this line). It imports them only
once it has held no job for a while (`WARM_WHEN_QUIET_S`): not under the runs it was given; a
worker never that quiet does after `WARM_AT_LATEST_S`.

Each test has a database of its own: whatever another test left due in a shared one (a schedule
firing, say) hands this worker jobs, and a fast-tier run on four processes once kept it from
ever being quiet for a second (the first test timed out, 180 s)."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.worker import WARM_WHEN_QUIET_S, WorkerHost
from tests.conftest import with_own_database
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled


@pytest.fixture
async def servers(servers: Servers) -> Servers:
    return await with_own_database(servers)


async def test_a_worker_logs_once_it_is_warm(
    settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="outlive.worker")
    host = WorkerHost(settings, concurrency=1, jobs_concurrency=1)
    await host.start()
    try:
        warming = [t for t in asyncio.all_tasks() if t.get_name() == "outlive-warm-up"]
        assert len(warming) == 1
        await warming[0]
        warm = [r.getMessage() for r in caplog.records if "worker warm" in r.getMessage()]
        assert len(warm) == 1
        assert "agents' modules imported in" in warm[0]
    finally:
        await host.stop()


@asynccontextmanager
async def _started_under_a_run(
    settings: Settings, api: Api, sessions: Sessions, tenant: TenantHandle, delay_ms: int
) -> AsyncIterator[tuple[str, NudgeWatch, asyncio.Task[None]]]:
    """A run of one turn of `delay_ms` started, then a worker: the run, a watch on its tenant's
    nudges, and the worker's warm-up task."""
    started = await api.start_run(tenant.token, input={"turns": 1, "delayMs": delay_ms})
    run_id = started["run"]["id"]
    host = WorkerHost(settings, concurrency=1, jobs_concurrency=1)
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        await host.start()
        try:
            warming = next(t for t in asyncio.all_tasks() if t.get_name() == "outlive-warm-up")
            yield run_id, watch, warming
        finally:
            await host.stop()


async def test_a_worker_warms_once_its_runs_are_over(
    settings: Settings,
    api: Api,
    sessions: Sessions,
    tenant: TenantHandle,
) -> None:
    """A run is waiting when the worker starts (a restart under load): no warm-up meanwhile."""
    async with _started_under_a_run(settings, api, sessions, tenant, 1500) as (
        run_id,
        watch,
        warming,
    ):
        await watch.until(run_id, settled)
        over = asyncio.get_running_loop().time()
        assert not warming.done()  # not while the run went on
        await warming
        assert asyncio.get_running_loop().time() - over >= WARM_WHEN_QUIET_S


async def test_a_worker_that_is_never_quiet_warms_up_at_the_latest_after_a_while(
    settings: Settings,
    api: Api,
    sessions: Sessions,
    tenant: TenantHandle,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A steady stream of jobs never leaves a second's quiet: the warm-up (and the freeze of
    the start-up heap after it) comes anyway, here while the one long run is still at work."""
    monkeypatch.setattr("outlive.worker.WARM_AT_LATEST_S", 0.5)
    async with _started_under_a_run(settings, api, sessions, tenant, 10_000) as (
        run_id,
        watch,
        warming,
    ):
        await watch.until(run_id, lambda run: run.status == "RUNNING")
        async with asyncio.timeout(30):
            await warming
        run = await watch.until(run_id, lambda run: True)
        assert run.status == "RUNNING"  # warm while it went on
