"""What an agent writes to a stream (`ctx.stream(name)`): display, never journaled.

`StreamWriter.write(text)` only appends to a buffer; a flusher sends the buffer to the run's
Redis stream (`realtime.outputs`) every `OUTLIVE_STREAM_BATCH_MS` (about 50 ms), so a model's
token-sized deltas cost one Redis round trip per batch, not one per delta. `close()` sends what
is left with a chunk that says `done`. A writer opened inside a durable step is closed when the
step ends, completed or failed (`StreamScope`), so each stream ends with its step.

Each chunk carries its `kind` (`write(text, kind=)`: "text" unless said) and the attempt that wrote
it. A stream that an earlier attempt left open (its worker died mid-step) is closed for readers by
a `reset` chunk when this attempt first writes it (`realtime.outputs`), and `restart()` asks for
one before the next text (a call that failed and is made again inside the step): a reader drops
what the stream showed and never shows a reply twice (round five, F7).

Redis failing costs the display only: a batch that cannot be written is dropped and logged once
per writer, and the run goes on (the journaled step is the truth a reader falls back to).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from contextvars import ContextVar
from types import TracebackType
from typing import TypeVar

from redis.exceptions import RedisError

from outlive.realtime.outputs import TEXT, OutputStore, Piece

log = logging.getLogger(__name__)

MAX_NAME = 64
T = TypeVar("T")

# The writers opened by the step the current task is executing (closed when it ends).
_OPENED: ContextVar[list[StreamWriter] | None] = ContextVar("outlive_streams", default=None)


class StreamWriter:
    """One named stream of one run; a no-op when the worker has no Redis (`store` None)."""

    def __init__(
        self,
        store: OutputStore | None,
        run_id: object,
        name: str,
        *,
        batch_s: float,
        attempt: int = 0,
    ) -> None:
        if not isinstance(name, str) or not 0 < len(name) <= MAX_NAME:
            raise ValueError(f"a stream name is 1 to {MAX_NAME} characters")
        self.name = name
        self.closed = False
        self._store, self._run_id, self._batch_s = store, run_id, batch_s
        self._attempt = attempt
        self._buffer: list[tuple[str, str, bool]] = []  # (kind, text, reset)
        self._wrote = False  # something was written since the last restart
        self._flusher: asyncio.Task[None] | None = None
        self._failed = False
        self._sending = False
        opened = _OPENED.get()
        if opened is not None:
            opened.append(self)

    def write(self, text: str, *, kind: str = TEXT) -> None:
        """Append `text` of `kind` (sent within about one batch interval); never blocks, never
        raises for Redis."""
        if self.closed:
            raise RuntimeError(f"stream {self.name!r} is closed")
        if not text or self._store is None:
            return
        self._wrote = True
        self._buffer.append((kind, text, False))
        self._schedule()

    def restart(self) -> None:
        """What this stream showed is to be dropped by readers: a `reset` chunk goes first."""
        if self.closed or self._store is None or not self._wrote:
            return
        self._wrote = False
        self._buffer.append((TEXT, "", True))
        self._schedule()

    def _schedule(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_later())

    async def _flush_later(self) -> None:
        await asyncio.sleep(self._batch_s)
        self._sending = True  # the batch leaves the buffer now: `close` lets it arrive
        try:
            await self._send(done=False)
        finally:
            self._sending = False

    async def _send(self, *, done: bool) -> None:
        buffered, self._buffer = self._buffer, []
        if self._store is None or (not buffered and not done):
            return
        chunks = [
            Piece(self.name, text, False, kind, self._attempt, reset)
            for kind, text, reset in _joined(buffered)
        ]
        if done:
            chunks.append(Piece(self.name, "", True, TEXT, self._attempt))
        try:
            await self._store.append(self._run_id, chunks)
        except (RedisError, OSError) as exc:
            if not self._failed:
                log.warning("run %s: stream %r lost a batch (%r)", self._run_id, self.name, exc)
            self._failed = True

    async def close(self) -> None:
        """Send what is left, then the chunk that ends the stream (`done`); once."""
        if self.closed:
            return
        self.closed = True
        if self._flusher is not None and self._sending:  # a batch on its way: it goes first
            await asyncio.wait([self._flusher])
        if self._flusher is not None and not self._flusher.done():
            self._flusher.cancel()
            try:
                await self._flusher
            except asyncio.CancelledError:
                current = asyncio.current_task()
                if current is not None and current.cancelling():
                    raise
        await self._send(done=True)

    async def __aenter__(self) -> StreamWriter:
        return self

    async def __aexit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()


def _joined(buffered: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    """Adjacent texts of one kind as one; a reset stands alone."""
    joined: list[tuple[str, str, bool]] = []
    for kind, text, reset in buffered:
        if joined and not reset and not joined[-1][2] and joined[-1][0] == kind:
            joined[-1] = (kind, joined[-1][1] + text, False)
        else:
            joined.append((kind, text, reset))
    return joined


async def within_step(awaitable: Awaitable[T]) -> T:
    """Await a durable step; the writers it opened are closed when it ends (with `done`)."""
    opened: list[StreamWriter] = []
    token = _OPENED.set(opened)
    try:
        return await awaitable
    finally:
        _OPENED.reset(token)
        for writer in opened:
            await asyncio.shield(writer.close())
