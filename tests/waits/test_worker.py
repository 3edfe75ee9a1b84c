"""WAITING holds no worker, and its timer lives in PostgreSQL (slow tier: own processes)."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import timedelta
from pathlib import Path

import pytest

from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.services import runs as runs_service
from outlive.worker import WorkerHost
from tests.conftest import make_settings, new_tenant
from tests.faults import OwnRedis
from tests.support import Api, NudgeWatch, Servers, service_env, settled, spawn_outlive

pytestmark = pytest.mark.timeout(180)


def waiting(run: runs_service.RunRecord) -> bool:
    return run.status == RunStatus.WAITING


async def test_a_worker_of_two_slots_holds_three_sleeping_runs_and_still_runs_a_fourth(
    servers: Servers, sessions: Sessions, tmp_path: Path
) -> None:
    settings = make_settings(servers)
    assert settings.redis_url is not None
    sleepers = [await new_tenant(sessions, "sleeper") for _ in range(3)]
    late = await new_tenant(sessions, "late")
    with (tmp_path / "worker.log").open("wb") as log:
        worker = spawn_outlive("worker", "--concurrency", "2", env=service_env(settings), log=log)
        try:
            async with Api.running(settings) as api:
                ids = []
                for tenant in sleepers:  # each sleeps an hour, durably
                    started = await api.start_run(
                        tenant.token, "demo", {"turns": 1, "delayMs": 0, "pauseMs": 3_600_000}
                    )
                    ids.append((tenant, started["run"]["id"]))
                for tenant, run_id in ids:
                    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
                        parked = await watch.until(run_id, waiting, timeout=60)
                    assert parked.lease_expires_at is None
                async with NudgeWatch(settings.redis_url, sessions, late.id) as watch:
                    began = time.monotonic()
                    started = await api.start_run(late.token, "demo", {"turns": 1, "delayMs": 0})
                    done = await watch.until(started["run"]["id"], settled, timeout=30)
                    took = time.monotonic() - began
                assert done.status == "SUCCEEDED", done.error
                assert took < 10, took  # at once: no slot is held by the sleepers
                for tenant, run_id in ids:
                    read = await api.run(tenant.token, run_id)
                    assert read is not None
                    assert read["status"] == "WAITING"
        finally:
            worker.send_signal(signal.SIGTERM)
            await asyncio.to_thread(worker.wait, 30)


async def test_a_timer_survives_redis_restarted_empty_and_fires(
    servers: Servers, sessions: Sessions, tmp_path: Path
) -> None:
    own = OwnRedis(tmp_path / "redis")
    await own.start()
    settings = make_settings(servers, redis_url=own.url, relay_scan_s=0.5)
    tenant = await new_tenant(sessions, "timer")
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        async with Api.running(settings) as api:
            async with NudgeWatch(own.url, sessions, tenant.id) as watch:
                started = await api.start_run(
                    tenant.token, "demo", {"turns": 1, "delayMs": 0, "pauseMs": 4000}
                )
                run_id = started["run"]["id"]
                parked = await watch.until(run_id, waiting, timeout=30)
            await own.restart(empty=True)  # every key is gone: no saq job, nothing scheduled
            async with NudgeWatch(own.url, sessions, tenant.id) as watch:
                done = await watch.until(run_id, settled, timeout=60)
        assert done.status == "SUCCEEDED", done.error
        events = await runs_service.list_events(sessions, done.id, first=1000)
        resumed = [e for e in events if e.type == "resumed"]
        assert [e.data for e in resumed] == [{"by": "timer"}]
        assert parked.wake_at is not None
        # handed back at most `OUTLIVE_WAKE_LEAD_S` ahead; the run goes on only once due
        assert resumed[0].at >= parked.wake_at - timedelta(seconds=settings.wake_lead_s)
        assert done.finished_at is not None
        assert done.finished_at >= parked.wake_at
    finally:
        await host.stop()
        await own.kill()
