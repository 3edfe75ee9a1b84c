"""Keep the cyclic garbage collector from rescanning every idle socket on every few fan-outs.

Each subscribed socket owns ~170 objects the collector tracks (uvicorn's protocol, strawberry's
handler, tasks, futures). A fan-out leaves a few new long-lived objects per socket (each idle
socket's next waiter), so with thousands of sockets CPython's full collection (which runs once the
objects created since the last one reach a quarter of all long-lived objects) fires every dozen
nudges and walks every socket's objects: ~0.5 s at 5,000 sockets, a pause every nudge behind it
waits out (`bench/nudges.py` saw it as a p99 several times the floor's).

`GcFreezer` moves what has settled into the permanent generation (`gc.freeze()`) whenever the
subscriber count has grown by a quarter since the last freeze, so full collections only look at
what is new. Frozen objects are still freed by reference counting; only reference cycles among them
wait: every `thaw_every_s` everything is unfrozen, collected once, and frozen again, so the cycles
of closed sockets are reclaimed at a known, rare moment instead of every few seconds.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable
from contextlib import suppress

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
THAW_EVERY_S = 300.0
MIN_SUBSCRIBERS = 256  # below this a full collection is cheap: nothing to do
GROWTH = 1.25


class GcFreezer:
    def __init__(
        self,
        subscriber_count: Callable[[], int],
        *,
        check_every_s: float = CHECK_EVERY_S,
        thaw_every_s: float = THAW_EVERY_S,
        min_subscribers: int = MIN_SUBSCRIBERS,
    ) -> None:
        self._count = subscriber_count
        self._check_every_s = check_every_s
        self._thaw_every_s = thaw_every_s
        self._min = min_subscribers
        self._frozen_at = 0  # subscriber count at the last freeze
        self._thawed_at = time.monotonic()
        self._task: asyncio.Task[None] | None = None
        self.freezes = 0
        self.thaws = 0

    def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outlive-gc-freezer")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        if self.freezes:
            gc.unfreeze()

    def tick(self) -> None:
        """One check: freeze after growth, thaw-collect-freeze when due."""
        count = self._count()
        now = time.monotonic()
        if self.freezes and now - self._thawed_at >= self._thaw_every_s:
            gc.unfreeze()
            self._thawed_at = now
            self.thaws += 1
            self._freeze(count)
        elif count >= self._min and count >= self._frozen_at * GROWTH:
            self._freeze(count)

    def _freeze(self, count: int) -> None:
        started = time.perf_counter()
        gc.collect()
        gc.freeze()
        self._frozen_at = count
        self.freezes += 1
        log.info(
            "realtime: froze %d objects at %d subscribers (%.0f ms)",
            gc.get_freeze_count(),
            count,
            (time.perf_counter() - started) * 1000,
        )

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._check_every_s)
            self.tick()
