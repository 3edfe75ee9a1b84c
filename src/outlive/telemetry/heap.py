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
    """What startup made is never collected again: the young generations collected, then the
    heap frozen. Not a full collection first: at this point one walked 90,000 to 150,000 objects
    (89 to 128 ms, in a process holding the API's modules) to find about 20 unreachable ones, and
    an `outlive api` was ready about 60 ms later for it (`bench/cold_start.py`; a worker alone,
    with fewer objects, showed no difference). What garbage has reached the oldest generation by
    now is frozen with the rest: a few objects."""
    gc.collect(1)
    gc.freeze()
