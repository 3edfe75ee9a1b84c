"""A run's in-process wait (`Interrupts.pause`: `ctx.delay`, the end of a sleep handed back
early) never ends before its time, on the worker's loop (uvloop, `outlive.cli.serve`), whose
timers fire up to a millisecond early, and a cancel request still ends it at once."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any, TypeVar

import pytest
import uvloop

from outlive.errors import RunCancelled
from outlive.workflows.calls import Interrupts

T = TypeVar("T")
WAIT_S = 0.0104  # not a whole millisecond: uvloop rounds a timer's delay to one


def run_on_uvloop(coroutine: Coroutine[Any, Any, T]) -> T:
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        return runner.run(coroutine)


@pytest.mark.parametrize("fine_s", [0.0, 0.002])
def test_a_pause_never_ends_early_on_the_workers_loop(fine_s: float) -> None:
    """`pause`, and `until` with its last 2 ms passed turn by turn (the end of a sleep)."""

    async def shortest() -> float:
        interrupts, shortest = Interrupts(), float("inf")
        for _ in range(50):
            started = time.monotonic()
            await interrupts.until(started + WAIT_S, fine_s=fine_s)
            shortest = min(shortest, time.monotonic() - started)
        return shortest

    assert run_on_uvloop(shortest()) >= WAIT_S


def test_a_cancel_request_ends_the_last_turns_of_a_pause() -> None:
    async def cancelled() -> None:
        interrupts = Interrupts()
        end = time.monotonic() + 60
        # past the timer: every turn from now on is in the fine part
        asyncio.get_running_loop().call_soon(interrupts.request)
        await interrupts.until(end, fine_s=120)

    with pytest.raises(RunCancelled):
        run_on_uvloop(cancelled())


def test_a_cancel_request_ends_a_pause_at_once() -> None:
    async def cancelled() -> float:
        interrupts = Interrupts()
        loop = asyncio.get_running_loop()
        loop.call_soon(interrupts.request)
        started = time.monotonic()
        with pytest.raises(RunCancelled):
            await interrupts.pause(60)
        return time.monotonic() - started

    assert run_on_uvloop(cancelled()) < 5
