"""WAITING holds no worker, and its timer lives in PostgreSQL (slow tier: own processes)."""

from __future__ import annotations

import asyncio
import signal
import time
from datetime import datetime, timedelta
from pathlib import Path

import pytest
from sqlalchemy import text

from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.services import runs as runs_service
from outlive.worker import WorkerHost
from tests.conftest import make_settings, new_tenant
from tests.faults import OwnRedis
from tests.support import (
    Api,
    NudgeWatch,
    Servers,
    WorkerProcesses,
    service_env,
    settled,
    spawn_outlive,
)

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


async def test_a_worker_killed_while_it_finishes_a_sleep_leaves_it_to_another_on_time(
    servers: Servers, sessions: Sessions, tmp_path: Path
) -> None:
    """The run is handed back ahead (a fixed lead of 60 s: at once), and the worker that claimed it
    waits in-process for the sleep's due time; SIGKILLed then, another worker takes the run over
    (its liveness), replays to the same resolved sleep, and goes on at its due time: not before,
    and not a lease or a second sleep later."""
    settings = make_settings(servers)
    assert settings.redis_url is not None
    tenant = await new_tenant(sessions, "killed")
    with WorkerProcesses.of(
        settings, tmp_path, OUTLIVE_WAKE_LEAD_S="60", OUTLIVE_WAKE_LEAD_BOUNDED="false"
    ) as workers:
        first = workers.start()
        async with (
            Api.running(settings) as api,
            NudgeWatch(settings.redis_url, sessions, tenant.id) as watch,
        ):
            started = await api.start_run(
                tenant.token, "demo", {"turns": 2, "delayMs": 0, "pauseMs": 15_000}
            )
            run_id = started["run"]["id"]
            held = await watch.until(run_id, finishing_its_sleep, timeout=60)
            until = await sleep_until(sessions, run_id)
            assert await db_now(sessions) < until  # claimed ahead: the sleep is not over
            workers.start()
            await wait_log(tmp_path / "worker-1.log", "worker started")
            await workers.kill(first)
            done = await watch.until(run_id, settled, timeout=90)
    assert held.attempt == 2
    assert done.status == "SUCCEEDED", done.error
    assert (done.attempt, done.lost_attempts, done.resumes) == (3, 1, 1)
    events = await runs_service.list_events(sessions, done.id, first=1000)
    turn_2 = next(e for e in events if e.type == "turn" and e.data == {"turn": 2})
    assert turn_2.at >= until  # never early, on the worker that took it over
    assert turn_2.at - until < timedelta(seconds=10)  # not a lease and a new sleep later
    assert [e.type for e in events].count("waiting") == 1  # the sleep was not slept again


def finishing_its_sleep(run: runs_service.RunRecord) -> bool:
    return run.status == RunStatus.RUNNING and run.attempt == 2


async def sleep_until(sessions: Sessions, run_id: str) -> datetime:
    row = await sessions.one(
        text("SELECT until FROM run_waits WHERE run_id = :r AND kind = 'sleep'"), r=run_id
    )
    assert row is not None
    until: datetime = row["until"]
    return until


async def db_now(sessions: Sessions) -> datetime:
    row = await sessions.one(text("SELECT clock_timestamp() AS now"))
    assert row is not None
    now: datetime = row["now"]
    return now


async def wait_log(log: Path, text: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while text not in await asyncio.to_thread(log.read_text, errors="replace"):
        assert time.monotonic() < deadline, f"{log.name} never said {text!r}"
        await asyncio.sleep(0.1)  # a log file has no event to await
