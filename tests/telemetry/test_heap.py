"""A process's startup holds the garbage collector (`telemetry.heap.hold`, from the CLI's first
import); the runtime, once up, turns it back on whether or not it freezes the heap."""

from __future__ import annotations

import gc

import pytest

from outlive.config import Settings
from outlive.runtime import open_runtime
from outlive.telemetry import heap


@pytest.mark.parametrize("freeze", [True, False])
async def test_a_held_collector_is_on_again_once_the_runtime_is_up(
    settings: Settings, freeze: bool
) -> None:
    heap.hold()
    try:
        assert not gc.isenabled()
        async with open_runtime(settings.model_copy(update={"gc_freeze": freeze}), "api"):
            assert gc.isenabled()
    finally:
        gc.enable()
        gc.unfreeze()


def test_a_freeze_after_a_held_startup_walks_nothing_and_keeps_everything() -> None:
    """The runtime's freeze comes before the release: what the held startup made is frozen as it
    is, not walked first (about 0.13 s of an API's start); with collection on, the young
    generations are collected first (the worker's freeze after its warm-up)."""
    walked: list[int] = []

    def count(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            walked.append(info["generation"])

    gc.callbacks.append(count)
    heap.hold()
    try:
        frozen = gc.get_freeze_count()
        made: list[list[int]] = [[] for _ in range(1000)]  # startup's, in the young generation
        assert gc.get_count()[0] >= len(made)
        heap.freeze()
        assert walked == []
        assert gc.get_freeze_count() >= frozen + len(made)  # all of it kept for good
        gc.unfreeze()
        heap.release()
        heap.freeze()
        assert walked == [1]
    finally:
        gc.callbacks.remove(count)
        gc.enable()
        gc.unfreeze()
