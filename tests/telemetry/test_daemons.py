"""The `Daemon` base: a crash is restarted with backoff, logged once, counted; stop cancels."""

from __future__ import annotations

import asyncio
import itertools
import logging

import pytest

from outlive.telemetry import metrics
from outlive.telemetry.daemons import Daemon


def _crashes(name: str) -> float:
    return metrics.DAEMON_CRASHES.labels(name)._value.get()


async def test_a_crashing_loop_is_restarted_with_backoff_logged_once_and_counted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls: list[float] = []
    fourth = asyncio.Event()
    loop = asyncio.get_running_loop()

    async def body() -> None:
        calls.append(loop.time())
        if len(calls) == 4:
            fourth.set()
            await asyncio.Event().wait()  # the fourth start stays up
        raise RuntimeError(f"boom {len(calls)}")

    before = _crashes("test-crashing")
    daemon = Daemon("test-crashing", body, backoff_min_s=0.02, backoff_max_s=5.0)
    with caplog.at_level(logging.DEBUG, logger="outlive.telemetry.daemons"):
        daemon.start()
        await asyncio.wait_for(fourth.wait(), 5)
        await daemon.stop()
    assert _crashes("test-crashing") - before == 3
    assert daemon.crashes == 3
    errors = [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert len(errors) == 1, [r.getMessage() for r in errors]
    assert errors[0].exc_info is not None
    assert "boom 1" in str(errors[0].exc_info[1])
    gaps = [b - a for a, b in itertools.pairwise(calls)]
    assert gaps[0] >= 0.02
    assert gaps[1] >= 0.04
    assert gaps[2] >= 0.08
    assert not daemon.running


async def test_a_crash_after_the_loop_ran_well_starts_a_new_streak_logged_again(
    caplog: pytest.LogCaptureFixture,
) -> None:
    calls = 0
    third = asyncio.Event()

    async def body() -> None:
        nonlocal calls
        calls += 1
        if calls == 2:
            await asyncio.sleep(0.06)  # ran longer than backoff_max_s: it was healthy
        if calls == 3:
            third.set()
            await asyncio.Event().wait()
        raise RuntimeError("boom")

    daemon = Daemon("test-streaks", body, backoff_min_s=0.01, backoff_max_s=0.05)
    with caplog.at_level(logging.WARNING, logger="outlive.telemetry.daemons"):
        daemon.start()
        await asyncio.wait_for(third.wait(), 5)
        await daemon.stop()
    assert len(caplog.records) == 2


async def test_stop_cancels_the_loop_and_waits_for_its_cleanup() -> None:
    entered, cleaned = asyncio.Event(), asyncio.Event()

    async def body() -> None:
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cleaned.set()

    daemon = Daemon("test-stop", body)
    await daemon.stop()  # never started: nothing to do
    daemon.start()
    daemon.start()  # already running: still one task
    await asyncio.wait_for(entered.wait(), 5)
    assert daemon.running
    await daemon.stop()
    assert cleaned.is_set()
    assert not daemon.running
    assert daemon.crashes == 0
    assert not [t for t in asyncio.all_tasks() if t.get_name() == "test-stop"]


async def test_a_body_that_returns_ends_the_daemon() -> None:
    done = asyncio.Event()

    async def body() -> None:
        done.set()

    daemon = Daemon("test-return", body)
    daemon.start()
    await asyncio.wait_for(done.wait(), 5)  # the body returned in the same step
    assert not daemon.running
    assert daemon.crashes == 0
    await daemon.stop()
