"""A background loop, started, stopped and kept alive one way: the `Daemon`.

Every loop a process runs beside its requests and jobs (the relay, the metrics sampler, the
LISTEN keepers, the socket re-check, the pub/sub links, the GC freezer) is a `Daemon` wrapping
its body, a coroutine function. `start()` runs the body in a task named after the daemon;
`stop()` cancels it and waits for it, so nothing is left running once the owner closed. A body
that raises is restarted after a backoff that doubles from `backoff_min_s` to `backoff_max_s`:
each crash is counted (`outlive_daemon_crashes_total{daemon}`), and the first crash of a streak
is logged once, with its traceback, not on every retry (the others at DEBUG). A crash after the
body ran `backoff_max_s` without raising starts a new streak: logged again, the backoff back at
its minimum. A body that returns ends the daemon.

The composition roots (`open_runtime`, `WorkerHost`) start daemons on their `AsyncExitStack`
(`Daemon.start_on`): stopped in the reverse order of their start, with everything else.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack, suppress

from outlive.telemetry import metrics

log = logging.getLogger(__name__)

Body = Callable[[], Awaitable[None]]

BACKOFF_MIN_S = 0.5
BACKOFF_MAX_S = 30.0


class Daemon:
    """One background loop: `start()`, `stop()`, restarted with backoff when its body raises."""

    def __init__(
        self,
        name: str,
        body: Body,
        *,
        backoff_min_s: float = BACKOFF_MIN_S,
        backoff_max_s: float = BACKOFF_MAX_S,
        label: str | None = None,
    ) -> None:
        self.name = name  # the task's name
        self.label = label or name  # the metric's label: bounded, never an id
        self._body = body
        self._backoff_min_s = backoff_min_s
        self._backoff_max_s = backoff_max_s
        self._task: asyncio.Task[None] | None = None
        self.crashes = 0

    @property
    def running(self) -> bool:
        return self._task is not None and not self._task.done()

    def start(self) -> None:
        """Run the body in the background (a second start while it runs is a no-op)."""
        if not self.running:
            self._task = asyncio.create_task(self._supervise(), name=self.name)

    def start_on(self, stack: AsyncExitStack) -> None:
        """Start it, and stop it when `stack` closes."""
        self.start()
        stack.push_async_callback(self.stop)

    async def stop(self) -> None:
        """Cancel the body and wait until it is gone; safe to call when it never started."""
        task, self._task = self._task, None
        if task is None:
            return
        task.cancel()
        with suppress(asyncio.CancelledError):
            await task

    async def _supervise(self) -> None:
        loop = asyncio.get_running_loop()
        backoff, in_streak = self._backoff_min_s, False
        while True:
            started = loop.time()
            try:
                await self._body()
            except Exception:  # noqa: BLE001 (any crash: counted, logged, restarted)
                if loop.time() - started >= self._backoff_max_s:
                    backoff, in_streak = self._backoff_min_s, False  # it ran well meanwhile
                self._crashed(first=not in_streak, backoff_s=backoff)
                in_streak = True
            else:
                return
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self._backoff_max_s)

    def _crashed(self, *, first: bool, backoff_s: float) -> None:
        self.crashes += 1
        metrics.DAEMON_CRASHES.labels(self.label).inc()
        if first:
            log.exception(
                "%s crashed; restarting it with backoff (from %.1fs)", self.name, backoff_s
            )
        else:
            log.debug("%s crashed again; restarting in %.1fs", self.name, backoff_s, exc_info=True)
