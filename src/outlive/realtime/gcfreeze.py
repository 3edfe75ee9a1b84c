"""Keep the cyclic garbage collector from rescanning every idle socket on every few fan-outs.

Each subscribed socket owns ~170 objects the collector tracks (uvicorn's protocol, strawberry's
handler, tasks, futures). A fan-out leaves a few new long-lived objects per socket (each idle
socket's next waiter), so with thousands of sockets CPython's full collection (which runs once the
objects created since the last one reach a quarter of all long-lived objects) fires every dozen
nudges and walks every socket's objects: ~0.5 s at 5,000 sockets, a pause every nudge behind it
waits out (`bench/nudges.py` saw it as a p99 several times the floor's).

`GcFreezer` keeps what has settled out of those collections: while the process has many
subscribers it calls `gc.freeze()` every second, which moves every tracked object into the
permanent generation (a cheap list splice), so a collection only ever looks at what the last second
made. Frozen objects are still freed by reference counting; only reference cycles among them wait:
every `thaw_every_s` everything is unfrozen and collected once, and with few subscribers the
process goes back to the default, so garbage cycles are reclaimed at a known, rare moment instead
of a full pass every few seconds.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import time
from collections.abc import Callable

from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

CHECK_EVERY_S = 1.0
THAW_EVERY_S = 300.0
MIN_SUBSCRIBERS = 256  # below this a full collection is cheap: nothing to do


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
        self._active = False  # objects are being frozen
        self._thawed_at = time.monotonic()
        self.daemon = Daemon("outlive-gc-freezer", self._run)
        self.thaws = 0

    @property
    def active(self) -> bool:
        return self._active

    def start(self) -> None:
        self.daemon.start()

    async def stop(self) -> None:
        await self.daemon.stop()
        if self._active:
            gc.unfreeze()
            self._active = False

    def tick(self) -> None:
        """One check: freeze what the last second made; thaw and collect when due."""
        count = self._count()
        now = time.monotonic()
        if count < self._min:
            if self._active:  # few sockets again: back to the default, cycles reclaimed
                self._thaw(now)
                self._active = False
            return
        if not self._active:
            gc.collect()  # garbage is not frozen with the rest
            self._active = True
            self._thawed_at = now
            log.info("realtime: %d subscribers; freezing settled objects", count)
        elif now - self._thawed_at >= self._thaw_every_s:
            self._thaw(now)
        gc.freeze()

    def _thaw(self, now: float) -> None:
        started = time.perf_counter()
        gc.unfreeze()
        gc.collect()
        self._thawed_at = now
        self.thaws += 1
        log.info("realtime: thawed and collected (%.0f ms)", (time.perf_counter() - started) * 1000)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self._check_every_s)
            self.tick()
