"""The process's heap and Python's garbage collector, which pauses the whole event loop.

A full (generation 2) collection walks every tracked object. An API or a worker holds a few
hundred thousand of them from startup alone (modules, the schema, each agent's pydantic models):
with the bench's 5,000 agents, one full pass took about 300 ms on a shared 2-core machine, during
which no claim, heartbeat, dequeue or request of that process moved. That was the quiet tenant's
p99 on the noisy-neighbour bench (issue 26). `freeze` moves everything alive at the end of
startup into the permanent generation (`gc.freeze`): collections then walk only what was made
since. `watch` times every collection (`outlive_gc_pause_seconds`, by generation).

`hold` goes further back: `outlive api` and `outlive worker` collect nothing automatically from
their first import until their runtime is up (`release`). Startup's imports make a few hundred
thousand objects, nearly all of which live for the whole process: an API's imports ran 320
young, 29 middle and 2 full collections over them, 0.17 s of its 1.7 s of imports on a 2-core VM,
and found next to nothing.
"""

from __future__ import annotations

import gc
import time
from typing import Any

from outlive.telemetry import metrics

_began: list[float] = []


def _timed(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        _began.append(time.perf_counter())
    elif _began:
        pause = time.perf_counter() - _began.pop()
        metrics.GC_PAUSE.labels(str(info.get("generation", "?"))).observe(pause)


def watch() -> None:
    """Time every collection of this process (once, however often it is called)."""
    if _timed not in gc.callbacks:
        gc.callbacks.append(_timed)


def hold() -> None:
    """No automatic collection until `release` (a process's startup, see above)."""
    gc.disable()


def release() -> None:
    """Automatic collection on again (a no-op where it never was held)."""
    gc.enable()


def freeze() -> None:
    """What is alive now is never collected again (`gc.freeze`). Where collection was held since
    the first import (`hold`: startup), nothing is walked first: the young generation then holds
    all of startup, and collecting it walked about 200,000 objects to find about 400 unreachable
    ones, 0.12 to 0.14 s on an `outlive api`'s path to ready (a 2-core VM; those few objects are
    frozen with the rest). Where collection runs (the worker's freeze after its warm-up, a process
    that never held), the young generations are small: they are collected first, so that what
    garbage the work since made is not kept for good."""
    if gc.isenabled():
        gc.collect(1)
    gc.freeze()
