"""Real worker processes: SIGKILL mid-run is recovered by another worker within 30 s, and a
graceful stop (SIGTERM) releases the run without costing it a retry."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.support import Api, NudgeWatch, TenantHandle, service_env, settled, spawn_outlive


@pytest.fixture
def worker_logs(tmp_path: Path) -> Iterator[list[IO[bytes]]]:
    logs: list[IO[bytes]] = []
    yield logs
    for log in logs:
        log.close()


def start_worker(
    settings: Settings, logs: list[IO[bytes]], tmp_path: Path
) -> subprocess.Popen[bytes]:
    log = (tmp_path / f"worker-{len(logs)}.log").open("wb")
    logs.append(log)
    # The production defaults for heartbeat (10 s) and sweep (5 s), not the tests' fast ones.
    env = service_env(settings, OUTLIVE_RUN_HEARTBEAT_S="10", OUTLIVE_RUN_SWEEP_S="5")
    return spawn_outlive("worker", "--concurrency", "4", env=env, log=log)


def stop(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=10)


async def _running_with_a_turn(watch: NudgeWatch, run_id: str) -> None:
    await watch.until(run_id, lambda r: r.status == "RUNNING", timeout=30)
    await watch.until_events(run_id, lambda es: any(e.type == "turn" for e in es), timeout=30)


async def test_a_sigkilled_worker_s_run_is_reclaimed_within_30_seconds(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    worker_logs: list[IO[bytes]],
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    first = start_worker(settings, worker_logs, tmp_path)
    second = None
    try:
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            started = await api.start_run(tenant.token, "demo", {"turns": 20, "delayMs": 250})
            run_id = started["run"]["id"]
            await _running_with_a_turn(watch, run_id)
            first.send_signal(signal.SIGKILL)
            killed_at = time.monotonic()
            await asyncio.to_thread(first.wait, 10)
            second = start_worker(settings, worker_logs, tmp_path)
            await watch.until(run_id, lambda r: r.attempt == 2, timeout=45)
            reclaimed_after = time.monotonic() - killed_at
            run = await watch.until(run_id, settled, timeout=60)
    finally:
        stop(first)
        if second is not None:
            stop(second)
    assert reclaimed_after < 30, f"re-claimed only after {reclaimed_after:.1f}s"
    assert run.status == "SUCCEEDED"
    assert run.attempt == 2
    assert run.output == {"turns": 20}


async def test_a_graceful_stop_releases_the_run_without_costing_a_retry(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    worker_logs: list[IO[bytes]],
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    first = start_worker(settings, worker_logs, tmp_path)
    second = None
    try:
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            started = await api.start_run(tenant.token, "demo", {"turns": 20, "delayMs": 250})
            run_id = started["run"]["id"]
            await _running_with_a_turn(watch, run_id)
            first.send_signal(signal.SIGTERM)
            assert await asyncio.to_thread(first.wait, 20) == 0
            released = await watch.until(run_id, lambda r: r.status == "QUEUED", timeout=5)
            assert released.attempt == 0
            second = start_worker(settings, worker_logs, tmp_path)
            run = await watch.until(run_id, settled, timeout=60)
            events = await watch.until_events(run_id, lambda es: True)
    finally:
        stop(first)
        if second is not None:
            stop(second)
    assert run.status == "SUCCEEDED"
    assert run.attempt == 1  # the released attempt was given back
    assert [e.type for e in events if e.type in ("claimed", "released")] == [
        "claimed",
        "released",
        "claimed",
    ]
