"""A hub subscriber: one socket's (or one resolver's) small coalescing buffer of nudges.

A subscriber holds at most one pending delivery per (type, id): a newer one replaces the older and
goes to the back of the line, so a slow socket costs nothing per repeated nudge. A stalled one
that falls more than `max_pending` distinct nudges behind is closed with 1013 (try again later)
instead: memory never grows with a stalled client, and the client's reconnect refetches
everything it shows, which no backlog could do better.

Two ways to consume it:

- **pull** (`next()`): a task awaits the next delivery (the `nudges` resolver, which strawberry
  executes per subscriber);
- **direct** (`attach(sink, on_close)`): the hub sends each delivery as it arrives, from the
  fan-out loop itself (the plain `nudges` selection, `realtime.sockets`). The send is started
  eagerly: a socket that is writable (nearly all of them) takes its frame without a task, a future
  or a wake-up of its own, as a plain broadcast loop would; only a send that must wait (the
  socket's buffer is full) becomes a task, and what arrives meanwhile waits in the coalescing
  buffer. At 10,000 idle sockets, the per-socket task woken through a future was a third of the
  fan-out's CPU (py-spy), and its task and frame ~1 KiB of each socket's memory (tracemalloc).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from typing import Any
from uuid import UUID

from outlive.realtime.nudges import Nudge

log = logging.getLogger(__name__)

MAX_PENDING = 256
CLOSE_GONE = 1001  # the peer is gone (a send failed): nothing to tell it
CLOSE_RESTART = 1012  # service restart: reconnect and refetch
CLOSE_TRY_AGAIN = 1013  # try again later: fell behind, over a cap, or PostgreSQL unreachable

Sink = Callable[["Delivery"], Coroutine[Any, Any, None]]


class SubscriberClosed(Exception):
    """The socket should be closed with `code`: the client reconnects and refetches."""

    def __init__(self, code: int, reason: str) -> None:
        super().__init__(reason)
        self.code = code
        self.reason = reason


class Delivery:
    """One received nudge, shared by every subscriber of its tenant."""

    __slots__ = ("_encoded", "key", "nudge")

    def __init__(self, nudge: Nudge) -> None:
        self.nudge = nudge
        self.key: tuple[str, UUID | None] = (nudge.type, nudge.id)
        self._encoded: dict[Any, str] = {}

    def encoded(self, key: Any, encode: Callable[[Nudge], str]) -> str:
        """`encode(nudge)`, computed once per `key` for all subscribers."""
        text = self._encoded.get(key)
        if text is None:
            text = self._encoded[key] = encode(self.nudge)
        return text


class Subscriber:
    __slots__ = (
        "_closed",
        "_max_pending",
        "_on_close",
        "_pending",
        "_sending",
        "_sink",
        "_waiter",
        "tenant_id",
    )

    def __init__(self, tenant_id: UUID, max_pending: int = MAX_PENDING) -> None:
        self.tenant_id = tenant_id
        self._max_pending = max_pending
        self._pending: dict[tuple[str, UUID | None], Delivery] = {}
        self._waiter: asyncio.Future[None] | None = None
        self._closed: SubscriberClosed | None = None
        self._sink: Sink | None = None
        self._on_close: Callable[[SubscriberClosed], None] | None = None
        self._sending: asyncio.Future[None] | None = None

    @property
    def backlog(self) -> int:
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def offer(self, delivery: Delivery) -> bool:
        """Send `delivery` now (direct, nothing in flight) or queue it (replacing a pending copy
        of the same type and id); False when this subscriber is closed, now or before."""
        if self._closed is not None:
            return False
        if self._sink is not None and self._sending is None and not self._pending:
            self._send(delivery)
            return self._closed is None
        pending = self._pending
        pending.pop(delivery.key, None)  # the newest copy goes to the back of the line
        pending[delivery.key] = delivery
        if len(pending) > self._max_pending:
            self.close(CLOSE_TRY_AGAIN, "too far behind: reconnect and refetch")
            return False
        self._wake()
        return True

    def close(self, code: int, reason: str) -> None:
        """Wake the consumer with `SubscriberClosed` (or call `on_close`, direct); pending
        nudges are dropped."""
        if self._closed is None:
            self._closed = SubscriberClosed(code, reason)
            self._pending.clear()
            if self._on_close is not None:
                self._on_close(self._closed)
        self._wake()

    # --- pull ----------------------------------------------------------------------------------

    def _wake(self) -> None:
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def next(self) -> Delivery:
        """The oldest pending delivery; raises `SubscriberClosed` once closed."""
        while True:
            if self._closed is not None:
                raise self._closed
            if self._pending:
                key = next(iter(self._pending))
                return self._pending.pop(key)
            self._waiter = asyncio.get_running_loop().create_future()
            try:
                await self._waiter
            finally:
                self._waiter = None

    # --- direct --------------------------------------------------------------------------------

    def attach(self, sink: Sink, on_close: Callable[[SubscriberClosed], None]) -> None:
        """From now on, each delivery is `sink(delivery)`, started as it arrives; `on_close`
        is called once, when the subscriber is closed (the hub's 1012 or 1013, a failed send)."""
        self._sink, self._on_close = sink, on_close
        if self._closed is not None:
            on_close(self._closed)
            return
        self._flush()

    def detach(self) -> None:
        """Stop for good (the operation completed, the socket ended): nothing more is sent, a
        send in flight is cancelled, `on_close` is not called."""
        self._sink = self._on_close = None
        if self._closed is None:
            self._closed = SubscriberClosed(CLOSE_GONE, "completed")
        self._pending.clear()
        if self._sending is not None:
            self._sending.cancel()

    def _send(self, delivery: Delivery) -> None:
        assert self._sink is not None  # noqa: S101 (direct mode only)
        coro = self._sink(delivery)
        try:
            step = coro.send(None)
        except StopIteration:
            return  # sent without waiting: the common case
        except Exception as exc:  # noqa: BLE001 (whatever the transport raised: the peer is gone)
            log.info("realtime: a send failed (%r); the socket's own loop ends it", exc)
            self.close(CLOSE_GONE, "send failed")
            return
        self._sending = sending = asyncio.ensure_future(_resume(coro, step))
        sending.add_done_callback(self._sent)

    def _sent(self, sending: asyncio.Future[None]) -> None:
        self._sending = None
        if sending.cancelled() or sending.exception() is not None:
            if not sending.cancelled():
                log.info("realtime: a send failed (%r)", sending.exception())
            self.close(CLOSE_GONE, "send failed")
            return
        self._flush()

    def _flush(self) -> None:
        while self._sending is None and self._pending and self._closed is None:
            key = next(iter(self._pending))
            self._send(self._pending.pop(key))


async def _resume(coro: Coroutine[Any, Any, None], step: Any) -> None:
    """Drive a coroutine that `Subscriber._send` started by hand and that suspended on `step`
    (what it yielded: a future, or None for a bare yield), to its end, as a task would."""
    while True:
        try:
            if step is None:
                await asyncio.sleep(0)  # a bare yield: back to the loop once
            else:
                # What a task does with a yielded future: it arrives marked as awaited (by the
                # coroutine's own `await`), and awaiting it again while so marked raises.
                step._asyncio_future_blocking = False
                await step
        except GeneratorExit:  # this driver is being closed (its loop is going away): so is it
            coro.close()
            raise
        except BaseException as exc:  # noqa: BLE001 (handed to the coroutine, as a task would)
            try:
                step = coro.throw(exc)
            except StopIteration:
                return
            continue
        try:
            step = coro.send(None)
        except StopIteration:
            return
