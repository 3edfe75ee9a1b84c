"""The event loop's lag is a metric (issue 26, the noisy neighbour): a coroutine that holds the
loop delays every other one of the process, and `outlive_event_loop_lag_seconds` shows by how
much."""

from __future__ import annotations

import asyncio
import gc
import time

from prometheus_client import REGISTRY

from outlive.jobs.telemetry import probe_lag


def _observed(role: str) -> tuple[float, float]:
    labels = {"role": role}
    count = REGISTRY.get_sample_value("outlive_event_loop_lag_seconds_count", labels) or 0.0
    total = REGISTRY.get_sample_value("outlive_event_loop_lag_seconds_sum", labels) or 0.0
    return count, total


async def test_a_loop_held_for_300_ms_shows_as_lag() -> None:
    role = "lag-test"
    probe = asyncio.create_task(probe_lag(role, every_s=0.05))
    try:
        await asyncio.sleep(0.2)  # a few quiet ticks
        quiet_count, quiet_sum = _observed(role)
        assert quiet_count >= 2
        time.sleep(0.3)  # holds the loop, as a big encode would  # noqa: ASYNC251
        await asyncio.sleep(0.12)
        count, total = _observed(role)
    finally:
        probe.cancel()
    assert count > quiet_count
    assert total - quiet_sum >= 0.25  # the held tick fired about 250 ms late


def test_collections_are_timed_and_startup_is_frozen() -> None:
    """Issue 26: a full collection of a worker's startup heap held its loop ~300 ms."""
    from outlive.telemetry import heap

    labels = {"generation": "1"}
    heap.watch()
    before = REGISTRY.get_sample_value("outlive_gc_pause_seconds_count", labels) or 0.0
    heap.freeze()  # the young generations collected, timed, then the heap is frozen
    assert REGISTRY.get_sample_value("outlive_gc_pause_seconds_count", labels) == before + 1
    assert gc.get_freeze_count() > 0
