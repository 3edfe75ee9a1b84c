"""Read coalescing: identical reads share one execution that starts after every one of them arrived.

The rule, which makes it correct by construction: a request never joins an execution that is
already in flight. Per key there is at most one execution running and at most one batch waiting.
A request joins the waiting batch (creating it when there is none); the batch is sealed at the
moment its execution starts, before it sends anything to the database, and only then. So every
request that shares an execution arrived before that execution started, and its answer reflects
every commit made before the request arrived. When no execution is running for the key, the batch
starts at once (on the next turn of the event loop, which lets the requests that arrived in the
same turn join it); when one is running, the batch starts the moment it finishes, and serves every
request that arrived meanwhile. N concurrent identical reads therefore cost at most two
executions, however large N is.

During a burst the next batch may linger before it starts, so that it serves more of the burst:
a batch created while an identical execution was running starts once no request has joined it for
`linger_s`, or once it is `max_wait_s` old, whichever comes first (never before the running one
finished). Starting later is always allowed by the rule above: the batch still starts after each
of its requests arrived. A lone read (nothing running for its key) starts at once.

The execution runs in a task of its own: a waiting request that is cancelled (its client went
away) leaves the batch, and the execution goes on for the others, even when the cancelled request
is the one whose callable it runs. An execution that raises hands the same exception to every
request of its batch; the next batch starts as usual. The key decides who may share: callers build
it from everything the answer depends on (see `http.read_key`).
"""

from __future__ import annotations

import asyncio
import contextvars
import logging
import secrets
from collections.abc import Awaitable, Callable, Hashable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

V = TypeVar("V")


class SharedExecutionCancelled(RuntimeError):
    """The shared execution was cancelled (the process is stopping); its requests get this."""


@dataclass(eq=False)
class _Batch(Generic[V]):
    execute: Callable[[], Awaitable[V]]
    future: asyncio.Future[V]
    created: float
    lingers: bool  # created during a burst: may wait for more of it
    last_join: float = 0.0
    size: int = 0
    id: str = ""
    # The context of the request that made the batch: its execution runs in it (its read scope,
    # its tenant's gate), never in the context of the execution that ran before it (whose
    # request's read budget it would go on spending: 20 clients reading the same 1 MiB ranges
    # were refused "answer larger than 4 MiB" after three batches).
    context: contextvars.Context = field(default_factory=contextvars.copy_context)


@dataclass(eq=False)
class _Lane(Generic[V]):
    running: _Batch[V] | None = None
    waiting: _Batch[V] | None = None


@dataclass(eq=False)
class Shared(Generic[V]):
    """What a request gets: the value, and which execution made it (for the response header)."""

    value: V
    execution: str  # random: reveals nothing of how many ran before it


@dataclass
class Coalescer(Generic[V]):
    """One per process. `run(key, execute)` answers with the value of an execution of `execute`
    (or of an identical request's callable) that started after this call."""

    linger_s: float = 0.0
    max_wait_s: float = 0.0
    _lanes: dict[Hashable, _Lane[V]] = field(default_factory=dict)
    _tasks: set[asyncio.Task[None]] = field(default_factory=set)

    async def run(self, key: Hashable, execute: Callable[[], Awaitable[V]]) -> Shared[V]:
        lane = self._lanes.get(key)
        if lane is None:
            lane = self._lanes[key] = _Lane()
        batch = lane.waiting
        loop = asyncio.get_running_loop()
        if batch is None:
            burst = lane.running is not None
            batch = lane.waiting = _Batch(execute, loop.create_future(), loop.time(), burst)
            if not burst:
                self._start(key, lane)
        batch.last_join = loop.time()
        batch.size += 1
        # Shielded: a cancelled request leaves; the execution goes on for the rest of its batch.
        value = await asyncio.shield(batch.future)
        return Shared(value, batch.id)

    def _start(self, key: Hashable, lane: _Lane[V]) -> None:
        batch = lane.waiting
        context = batch.context if batch is not None else None
        task = asyncio.get_running_loop().create_task(self._execute(key, lane), context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _linger(self, batch: _Batch[V]) -> None:
        loop = asyncio.get_running_loop()
        deadline = batch.created + self.max_wait_s
        # A timer by design: the batch waits for a pause in arrivals, not for an event.
        while (wake := min(batch.last_join + self.linger_s, deadline)) > loop.time():  # noqa: ASYNC110
            await asyncio.sleep(wake - loop.time())

    async def _execute(self, key: Hashable, lane: _Lane[V]) -> None:
        batch = lane.waiting
        assert batch is not None  # noqa: S101 (only started with a waiting batch)
        if batch.lingers and self.linger_s > 0:
            try:
                await self._linger(batch)
            except asyncio.CancelledError:
                lane.waiting = None
                del self._lanes[key]
                batch.future.set_exception(SharedExecutionCancelled("the read was cancelled"))
                batch.future.add_done_callback(_retrieve)
                raise
        lane.running, lane.waiting = batch, None  # sealed: nobody joins it from here on
        batch.id = secrets.token_hex(8)
        # Retrieved here, so an exception nobody waits for any more is never logged as lost.
        batch.future.add_done_callback(_retrieve)
        try:
            batch.future.set_result(await batch.execute())
        except asyncio.CancelledError:
            batch.future.set_exception(SharedExecutionCancelled("the read was cancelled"))
            raise
        except Exception as exc:  # noqa: BLE001 (every request of the batch gets it)
            batch.future.set_exception(exc)
        finally:
            lane.running = None
            if lane.waiting is not None:
                self._start(key, lane)
            else:
                del self._lanes[key]

    async def cancel_all(self) -> None:
        """Cancel the running executions (at shutdown); their requests get an error."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        # An execution cancelled before its first step never reached its own handler.
        for lane in self._lanes.values():
            for batch in (lane.running, lane.waiting):
                if batch is not None and not batch.future.done():
                    batch.future.set_exception(SharedExecutionCancelled("the read was cancelled"))
                    batch.future.add_done_callback(_retrieve)
        self._lanes.clear()


def _retrieve(future: asyncio.Future[Any]) -> None:
    if not future.cancelled():
        future.exception()
