"""The dispatch table: every expression fires as its own saq cron job; a failing task does not
stop its neighbours; two worker processes run each tick once."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import time
from collections import Counter
from itertools import pairwise
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from croniter import croniter
from redis.asyncio import Redis
from saq import Status, Worker

from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.dispatch import cron_jobs, function_name, run_tick
from outlive.cron.table import CRON
from outlive.db.tx import Sessions
from outlive.jobs.graceful import CRON_RENEW_S, GracefulWorker
from outlive.jobs.queues import create_queue
from tests.cron import fast_table
from tests.support import service_env, spawn_outlive

ROOT = Path(__file__).resolve().parents[2]


def test_every_expression_is_valid_and_gets_a_function_of_its_own() -> None:
    assert CRON
    assert all(croniter.is_valid(e) for e in CRON)
    names = [job.function.__qualname__ for job in cron_jobs(CRON)]
    assert names == [function_name(e) for e in CRON]
    assert len(set(names)) == len(CRON)


async def test_scheduling_enqueues_one_job_per_expression(settings: Settings) -> None:
    """saq keys cron jobs by function name: a shared dispatcher would leave one job here."""
    queue = create_queue(settings.redis_url or "", "cron-schedule-test")
    worker: Worker[Any] = Worker(queue, functions=[], cron_jobs=cron_jobs(CRON))
    await worker.schedule()
    jobs = [await queue.job(f"cron:{function_name(e)}") for e in CRON]
    assert all(job is not None for job in jobs)
    assert await queue.count("incomplete") == len(CRON)
    await queue.disconnect()


async def test_a_cron_job_is_enqueued_once_per_fire_time_and_renewed(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`GracefulWorker.schedule`: not every second (saq's), but when its fire time came or
    `CRON_RENEW_S` passed, which puts back a job that Redis lost."""
    queue = create_queue(settings.redis_url or "", "cron-renew-test")
    worker = GracefulWorker(queue, functions=[], cron_jobs=cron_jobs(CRON))
    key = f"cron:{function_name(next(iter(CRON)))}"
    await worker.schedule()
    assert await queue.job(key) is not None
    await queue.redis.delete(queue.job_id(key))  # Redis lost it
    await queue.redis.zrem(queue._incomplete, queue.job_id(key))  # saq's incomplete set
    await worker.schedule()  # a second later: nothing enqueued, the queue's pass alone
    assert await queue.job(key) is None
    later = time.time() + CRON_RENEW_S
    monkeypatch.setattr("outlive.worker.time.time", lambda: later)
    await worker.schedule()
    assert await queue.job(key) is not None  # renewed
    await queue.disconnect()


async def test_a_worker_finding_the_fire_enqueued_by_another_does_not_enqueue_again(
    settings: Settings,
) -> None:
    """Two workers of one queue: the second finds the job the first enqueued for the same fire
    time and leaves it until then, instead of an enqueue round trip on every pass."""
    queue = create_queue(settings.redis_url or "", "cron-second-worker-test")
    first, second = (GracefulWorker(queue, functions=[], cron_jobs=cron_jobs(CRON)) for _ in "ab")
    await first.schedule()
    enqueues: list[str] = []
    real = queue.enqueue

    async def counted(function: Any, **kwargs: Any) -> Any:
        enqueues.append(str(function))
        return await real(function, **kwargs)

    queue.enqueue = counted  # type: ignore[assignment]
    await second.schedule()
    assert len(enqueues) == len(CRON)  # one look each, finding the first worker's job
    await second.schedule()  # a second later
    assert len(enqueues) == len(CRON)  # nothing more until the fire time
    await queue.disconnect()


async def test_a_fire_time_passed_while_the_last_tick_held_the_key_runs_late_not_never(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """saq keeps one job per cron key: a tick still queued or at work when the next fire time
    comes holds it. The next enqueue after it finished is that fire time, late, not the one
    after (what a fresh-clone CI run on a loaded machine met: ticks 276, 278, 280, 284), and a
    worker that learned the last fire time from the key (not its own enqueue) does it too."""
    queue = create_queue(settings.redis_url or "", "cron-late-test")
    first, second = (
        GracefulWorker(queue, functions=[], cron_jobs=cron_jobs(fast_table.CRON)) for _ in "ab"
    )
    key = f"cron:{function_name(next(iter(fast_table.CRON)))}"
    await first.schedule()
    job = await queue.job(key)
    assert job is not None
    fired = job.scheduled  # an even second; the next fire is 2 s later
    clock = {"now": fired + 2.5}  # the tick of `fired` still holds the key past the next
    monkeypatch.setattr("outlive.jobs.graceful.time.time", lambda: clock["now"])
    await second.schedule()  # learns `fired` from the job that holds the key
    assert (await queue.job(key)).scheduled == fired  # type: ignore[union-attr]
    await queue.finish(job, Status.COMPLETE)  # the tick of `fired` ends
    clock["now"] = fired + 2.6
    await second.schedule()
    late = await queue.job(key)
    assert late is not None
    assert late.status == Status.QUEUED
    assert late.scheduled == fired + 2  # late, not fired + 4
    await queue.finish(late, Status.COMPLETE)
    clock["now"] = fired + 2.7
    await second.schedule()
    assert (await queue.job(key)).scheduled == fired + 4  # type: ignore[union-attr]
    await queue.disconnect()


@pytest.fixture
async def cron_deps(settings: Settings, sessions: Sessions) -> Any:
    redis = Redis.from_url(settings.redis_url or "")
    yield CronDeps(sessions=sessions, settings=settings, redis=redis)
    await redis.aclose()


async def test_every_generated_function_runs_its_tasks_once_per_tick(
    cron_deps: CronDeps,
) -> None:
    tick = SimpleNamespace(scheduled=int(time.time()) + 10_000)  # a tick of this test's own
    for job in cron_jobs(CRON):
        expression = job.cron
        report = await job.function({"outlive": SimpleNamespace(cron=cron_deps), "job": tick})
        assert report["expression"] == expression
        assert report["ran"] == [t.__name__ for t in CRON[expression]]
        assert report["failed"] == {}
        again = await job.function({"outlive": SimpleNamespace(cron=cron_deps), "job": tick})
        assert again["skipped"] is True  # the same tick, delivered twice, runs once
        assert again["ran"] == []


async def test_a_failing_task_is_reported_and_its_neighbours_still_run(
    cron_deps: CronDeps, caplog: pytest.LogCaptureFixture
) -> None:
    ran: list[str] = []

    async def first(deps: CronDeps) -> int:
        ran.append("first")
        return 1

    async def boom(deps: CronDeps) -> int:
        raise RuntimeError("disk on fire")

    async def slow(deps: CronDeps) -> int:
        await asyncio.Event().wait()  # never finishes: the time limit ends it
        return 0

    async def last(deps: CronDeps) -> int:
        ran.append("last")
        return 2

    with caplog.at_level(logging.ERROR, logger="outlive.cron.dispatch"):
        report = await run_tick(cron_deps, "7 7 * * *", [first, boom, slow, last], timeout_s=0.2)
    assert ran == ["first", "last"]
    assert report.ran == ["first", "last"]
    assert report.failed == {"boom": "RuntimeError: disk on fire", "slow": "TimeoutError"}
    assert report.touched == {"first": 1, "last": 2}
    logged = [r.getMessage() for r in caplog.records]
    assert "cron '7 7 * * *' task boom failed" in logged
    assert "cron '7 7 * * *' task slow failed" in logged


async def test_two_worker_processes_run_each_tick_exactly_once(
    settings: Settings, tmp_path: Path
) -> None:
    redis = Redis.from_url(settings.redis_url or "")
    pubsub = redis.pubsub()
    await pubsub.subscribe("outlive:test:fasttick")
    env = service_env(
        settings,
        OUTLIVE_CRON_TABLE="tests.cron.fast_table:CRON",
        PYTHONPATH=f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    )
    logs = [(tmp_path / f"w{i}.log").open("wb") for i in range(2)]
    workers = [spawn_outlive("worker", "--concurrency", "2", env=env, log=log) for log in logs]
    runs: list[tuple[int, int]] = []
    try:
        async with asyncio.timeout(60):
            while len({tick for tick, _ in runs}) < 4:
                message = await pubsub.get_message(ignore_subscribe_messages=True, timeout=5)
                if message is not None:
                    tick, pid, _ = message["data"].decode().split()
                    runs.append((int(tick), int(pid)))
    finally:
        for w in workers:
            w.send_signal(signal.SIGTERM)
        for w in workers:
            await asyncio.to_thread(w.wait, 20)
        for log in logs:
            log.close()
        await pubsub.aclose()
    per_tick = Counter(tick for tick, _ in runs)
    assert set(per_tick.values()) == {1}, per_tick
    ticks = sorted(per_tick)
    assert all(b - a == 2 for a, b in pairwise(ticks)), ticks  # none missed
    counters = [int(await redis.get(f"outlive:test:fasttick:{t}") or 0) for t in ticks]
    await redis.aclose()
    assert counters == [1] * len(ticks)
