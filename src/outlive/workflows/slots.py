"""Worker slots lent while an attempt waits in-process for a sleep's due time.

A durable sleep's run is handed back `OUTLIVE_WAKE_LEAD_S` before it is due
(`services.relay.lead`), and the attempt that claims it finishes the sleep in-process, so the
run goes on at its due time and not a hand-off, a claim and a replay later. While it waits it
does nothing, yet it held one of the worker's slots (saq's process loops: each runs one job at a
time), so a burst of early wakes held every slot while due work queued behind them, and the lead
had to be shortened under bursts, leaving the wakes late (`bench/peers.py --only sleeps`).

Now an attempt waiting out the rest of its sleep *lends* its slot (`SlotLender.lent`): the
worker starts one more process loop, which takes the next job. When the wait ends the attempt
takes a slot back before it goes on:

- the worker has an idle loop (blocked on the queue, holding no job): its slot is taken at once,
  and one loop ends after its next job (a *surplus* loop), so the loops come back to the
  worker's concurrency;
- every loop holds a job: the attempt goes on at once, over the count, and one loop ends after
  its job (a surplus loop too), while fewer than `overdraft` attempts are over the count;
- past that, the attempt waits for the first job to finish; that loop ends instead of taking
  another job, and the attempt goes on in its slot. Attempts coming back go before new jobs
  (first come first), as a woken run goes before new runs on the queue.

So at most `concurrency + overdraft` attempts execute at once, the ones over the count only
until as many jobs end, and at most `most` attempts wait lent. The overdraft is the worker's
concurrency (`OVERDRAFT_FACTOR`): an attempt coming back is due work, and waiting for a slot made
it late by the job ahead of it (`bench/peers.py --only sleeps`: up to 160 ms at p99 under a
burst of 1,000 wakes, 0 with the overdraft; `docs/architecture.md`).

A wait shorter than `LEND_MIN_S`, or one past `most`, holds its slot as before; a worker that is
stopping lends nothing (its attempts are cancelled and release their runs). A lent wait holds no
database connection and no job slot: its run keeps its lease (the heartbeats go on).
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Protocol

LEND_MIN_S = 0.005  # a shorter wait keeps its slot: a loop's start costs more than it saves
LEND_FACTOR = 4  # a worker lends at most this many slots per slot of its concurrency
# ... and goes over its concurrency by at most this many per slot to take lent slots back
OVERDRAFT_FACTOR = 1


class LoopOwner(Protocol):
    """What the lender needs of the saq worker that owns the loops (`worker.GracefulWorker`)."""

    def add_loop(self) -> None:
        """Start one more process loop."""

    def idle_loops(self) -> int:
        """Loops waiting on the queue, holding no job."""

    def stopping(self) -> bool:
        """The worker is stopping: no loop starts."""


class SlotLender:
    """One worker's lent slots (see the module's docstring). Not bound to a worker (a test's
    engine, the API process): `lent()` keeps the slot."""

    def __init__(self, most: int, overdraft: int = 0) -> None:
        self.most = most
        self.overdraft = overdraft
        self._owner: LoopOwner | None = None
        self._lent = 0
        self._surplus = 0  # loops to end after their next job
        self._returning: deque[asyncio.Future[None]] = deque()

    def bind(self, owner: LoopOwner) -> None:
        self._owner = owner

    @property
    def lent_now(self) -> int:
        return self._lent

    @asynccontextmanager
    async def lent(self, seconds: float) -> AsyncIterator[None]:
        """The block waits about `seconds` without the attempt's slot (when it may be lent)."""
        owner = self._owner
        if owner is None or seconds < LEND_MIN_S or self._lent >= self.most or owner.stopping():
            yield
            return
        self._lent += 1
        owner.add_loop()
        try:
            yield
        finally:
            self._lent -= 1
            await self._take_back(owner)

    async def _take_back(self, owner: LoopOwner) -> None:
        if owner.stopping() or self._surplus - owner.idle_loops() < self.overdraft:
            # an idle loop's slot, or one over the count: a loop ends after its next job
            self._surplus += 1
            return
        returning = asyncio.get_running_loop().create_future()
        self._returning.append(returning)
        try:
            await returning
        except asyncio.CancelledError:
            if not returning.done():  # no loop ended for it: one must still end
                self._returning.remove(returning)
                self._surplus += 1
            raise

    def loop_ends(self) -> bool:
        """A process loop finished its job: True when it ends there, its slot going to an
        attempt coming back from a lent wait, or the loops being over the worker's count."""
        while self._returning:
            returning = self._returning.popleft()
            if not returning.done():
                returning.set_result(None)
                return True
        if self._surplus:
            self._surplus -= 1
            return True
        return False
