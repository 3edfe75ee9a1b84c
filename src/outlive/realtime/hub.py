"""One Redis subscription per process, fanned out in-process by tenant.

Each API process holds a single pattern subscription on the nudge channels, whatever the number of
sockets. A message is parsed once into a `Delivery` that every subscriber of its tenant shares
(and that caches each encoding of it, so a frame is serialized once, not once per socket).

A subscriber is a small coalescing buffer: it holds at most one pending delivery per (type, id) (a
newer one replaces the older and goes to the back of the line), so a slow socket costs nothing per
repeated nudge. A stalled one that falls more than `max_pending` distinct nudges behind is closed
with 1013 (try again later) instead: memory never grows with a stalled client, and the client's
reconnect refetches everything it shows, which no backlog could do better.

A lost Redis connection is re-established with backoff. When it comes back, every subscriber is
closed with 1012 (service restart): whatever was published in between was missed, and a client's
reconnect is what makes it whole. At shutdown, `stop()` closes every subscriber with 1012 too.

The same connection also carries the process's control channel (token revocations, see
`realtime.revocations`): `on_control` gets each message, `is_live` says whether the subscription
is up (so that nothing trusts a cache a missed message could have invalidated), and
`on_resubscribed` runs when it comes back. With nudges off (`OUTLIVE_REALTIME=0`) the hub still
listens to the control channel, and only to it.
"""

from __future__ import annotations

import asyncio
import logging
import os
import random
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager, suppress
from typing import Any
from uuid import UUID

from redis.asyncio import Redis
from redis.exceptions import RedisError

from outlive.realtime.gcfreeze import GcFreezer
from outlive.realtime.nudges import Nudge
from outlive.telemetry import metrics

log = logging.getLogger(__name__)

MAX_PENDING = 256
IDLE_PING_S = 30.0
CLOSE_RESTART = 1012  # service restart: reconnect and refetch
CLOSE_TRY_AGAIN = 1013  # try again later: this socket fell behind


def hub_client_name() -> str:
    """The name of a hub's Redis connection (`CLIENT LIST`): one per API process."""
    return f"outlive-hub-{socket.gethostname()}-{os.getpid()}"


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
    __slots__ = ("_closed", "_max_pending", "_pending", "_waiter", "tenant_id")

    def __init__(self, tenant_id: UUID, max_pending: int = MAX_PENDING) -> None:
        self.tenant_id = tenant_id
        self._max_pending = max_pending
        self._pending: dict[tuple[str, UUID | None], Delivery] = {}
        self._waiter: asyncio.Future[None] | None = None
        self._closed: SubscriberClosed | None = None

    @property
    def backlog(self) -> int:
        return len(self._pending)

    @property
    def closed(self) -> bool:
        return self._closed is not None

    def offer(self, delivery: Delivery) -> bool:
        """Queue `delivery` (replacing a pending copy of the same type and id); False when this
        subscriber is closed, now that it is too far behind, or before."""
        if self._closed is not None:
            return False
        pending = self._pending
        pending.pop(delivery.key, None)  # the newest copy goes to the back of the line
        pending[delivery.key] = delivery
        if len(pending) > self._max_pending:
            self.close(CLOSE_TRY_AGAIN, "too far behind: reconnect and refetch")
            return False
        self._wake()
        return True

    def close(self, code: int, reason: str) -> None:
        """Wake the consumer with `SubscriberClosed`; pending nudges are dropped."""
        if self._closed is None:
            self._closed = SubscriberClosed(code, reason)
            self._pending.clear()
        self._wake()

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


class Hub:
    def __init__(
        self,
        redis: Redis,
        *,
        prefix: str,
        max_pending: int = MAX_PENDING,
        nudges: bool = True,
        control_channel: str | None = None,
        on_control: Callable[[bytes | str], None] | None = None,
        on_resubscribed: Callable[[], None] | None = None,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._max_pending = max_pending
        self._nudges = nudges
        self._control_channel = control_channel
        self._on_control = on_control
        self._on_resubscribed = on_resubscribed
        self._groups: dict[UUID, set[Subscriber]] = {}
        self._count = 0
        self._watchers: list[asyncio.Future[None]] = []
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.received = 0
        self.freezer = GcFreezer(lambda: self._count)  # see gcfreeze: no full-GC pause per fan-out

    # --- lifecycle ---------------------------------------------------------------------------

    def is_live(self) -> bool:
        """Subscribed right now: a control message published now would be heard."""
        return self.ready.is_set()

    async def start(self, *, wait_s: float = 2.0) -> None:
        """Subscribe in the background; wait up to `wait_s` for it, so that a process that has
        just started does not miss its first nudges. Never fails: realtime is optional."""
        self._task = asyncio.create_task(self._run(), name="outlive-realtime-hub")
        self.freezer.start()
        try:
            async with asyncio.timeout(wait_s):
                await self.ready.wait()
        except TimeoutError:
            log.warning("realtime: not subscribed after %.1fs; still trying", wait_s)

    async def stop(self) -> None:
        """Close every subscriber with 1012 (clients reconnect), then unsubscribe."""
        self.close_all(CLOSE_RESTART, "server shutting down")
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task
            self._task = None
        await self.freezer.stop()

    def close_all(self, code: int, reason: str) -> int:
        """Close and unregister every subscriber; their sockets are closed with `code`."""
        subscribers = [s for group in self._groups.values() for s in group]
        for subscriber in subscribers:
            subscriber.close(code, reason)
            self.remove(subscriber)
        return len(subscribers)

    # --- subscribers -------------------------------------------------------------------------

    @property
    def subscriber_count(self) -> int:
        return self._count

    def add(self, tenant_id: UUID) -> Subscriber:
        """Register now (synchronously: nothing published after this call is missed)."""
        subscriber = Subscriber(tenant_id, self._max_pending)
        self._groups.setdefault(tenant_id, set()).add(subscriber)
        self._count += 1
        self._changed()
        return subscriber

    def remove(self, subscriber: Subscriber) -> None:
        """Idempotent."""
        group = self._groups.get(subscriber.tenant_id)
        if group is None or subscriber not in group:
            return
        group.discard(subscriber)
        if not group:
            del self._groups[subscriber.tenant_id]
        self._count -= 1
        self._changed()

    @asynccontextmanager
    async def subscribe(self, tenant_id: UUID) -> AsyncIterator[Subscriber]:
        subscriber = self.add(tenant_id)
        try:
            yield subscriber
        finally:
            self.remove(subscriber)

    async def until(self, predicate: Callable[[int], bool]) -> None:
        """Wait until `predicate(subscriber_count)` holds (for tests and benchmarks)."""
        loop = asyncio.get_running_loop()
        while not predicate(self._count):
            watcher = loop.create_future()
            self._watchers.append(watcher)
            await watcher

    def _changed(self) -> None:
        watchers, self._watchers = self._watchers, []
        for watcher in watchers:
            if not watcher.done():
                watcher.set_result(None)

    # --- the one Redis subscription ----------------------------------------------------------

    def dispatch(self, channel: str, data: bytes | str) -> None:
        """Hand one message to its tenant's subscribers (nobody listening: not even parsed)."""
        try:
            tenant_id = UUID(channel[len(self._prefix) :])
        except ValueError:
            log.warning("realtime: ignoring a message on %s", channel)
            return
        group = self._groups.get(tenant_id)
        if not group:
            return
        try:
            nudge = Nudge.from_wire(data)
        except (ValueError, KeyError, TypeError):
            log.warning("realtime: ignoring a malformed nudge on %s", channel)
            return
        if nudge.tenant_id != tenant_id:
            log.warning("realtime: ignoring a nudge whose tenant does not match its channel")
            return
        delivery = Delivery(nudge)
        overflowed = []
        for subscriber in group:
            if not subscriber.offer(delivery):
                overflowed.append(subscriber)
        for subscriber in overflowed:  # its socket may be stalled in a send: leave the hub now
            self.remove(subscriber)
        metrics.NUDGE_FANOUT.observe(max(0.0, time.time() - nudge.at.timestamp()))

    async def _run(self) -> None:
        delay = 0.5
        subscribed_before = False
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await self._subscribe(pubsub)
                self.ready.set()
                if subscribed_before:
                    closed = self.close_all(CLOSE_RESTART, "realtime restored: refetch")
                    log.info("realtime: closed %d socket(s) that may have missed nudges", closed)
                    if self._on_resubscribed is not None:
                        self._on_resubscribed()
                subscribed_before, delay = True, 0.5
                await self._listen(pubsub)
            except (RedisError, OSError) as exc:
                log.warning("realtime: subscription lost (%r); retrying in ~%.1fs", exc, delay)
            finally:
                self.ready.clear()
                with suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
            await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 (jitter)
            delay = min(delay * 2, 15.0)

    async def _subscribe(self, pubsub: Any) -> None:
        if self._nudges:
            await pubsub.psubscribe(f"{self._prefix}*")
            log.info("realtime: subscribed to %s*", self._prefix)
        if self._control_channel is not None:
            await pubsub.subscribe(self._control_channel)

    async def _listen(self, pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=IDLE_PING_S)
            if message is None:
                await pubsub.ping()  # an idle link that died raises here, and is re-made
            elif message["type"] == "pmessage":
                self.received += 1
                channel = message["channel"]
                if isinstance(channel, bytes):
                    channel = channel.decode()
                self.dispatch(channel, message["data"])
            elif message["type"] == "message" and self._on_control is not None:
                try:
                    self._on_control(message["data"])
                except Exception:
                    log.exception("realtime: a control message failed")
