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
