"""A graceful stop that buys no model reply twice (issue 40, round five F8).

A worker that is stopped (SIGTERM: a deploy) hands its runs back at once: each attempt is
cancelled and its run released to QUEUED, its attempt given back (`workflows.runs`). A step that
was executing then records nothing, and the next attempt executes it again: for a model call,
a reply bought twice (a rolling deploy re-bought every reply in flight, 3 of 3).

So a step declared `drain=True` (every model request of `outlive.agents.pydantic_ai`) may
finish: when the worker stops, `Drains.drain` waits for the drainable steps in flight to end and
be recorded, up to `OUTLIVE_SHUTDOWN_STEP_GRACE_S`, and meanwhile no step starts (a step that
would start waits for the stop to cancel its attempt, and its run is handed back before it).
Recorded steps still return from the journal, so an attempt reaches its next unrecorded step.
A drainable step that overruns the grace is cancelled with its attempt, as before.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator


class Drains:
    """The drainable steps in flight in one worker process, and its stop."""

    def __init__(self) -> None:
        self.stopping = False
        self._in_flight = 0
        self._idle = asyncio.Event()
        self._idle.set()
        self._never = asyncio.Event()  # what a step that would start while stopping waits for

    @contextlib.contextmanager
    def step(self) -> Iterator[None]:
        """Around a drainable step's calls and its record."""
        self._in_flight += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._in_flight -= 1
            if self._in_flight == 0:
                self._idle.set()

    async def admit(self) -> None:
        """Before a step executes: while the worker stops, it does not start (it waits for the
        stop to cancel its attempt, whose run is handed back)."""
        if self.stopping:
            await self._never.wait()

    async def drain(self, grace_s: float) -> int:
        """Stop starting steps; wait up to `grace_s` for the drainable ones in flight to end.
        How many were still in flight then (0: all of them ended)."""
        self.stopping = True
        if grace_s > 0:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(grace_s):
                    await self._idle.wait()
        return self._in_flight
