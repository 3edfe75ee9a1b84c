"""Redis subscriptions by tenant, fanned out in-process.

**A process hears only the tenants it serves.** The hub subscribes to a tenant's channel
(`<prefix><tenant id>`) when the first local subscriber of that tenant arrives, and unsubscribes
`linger_s` (`OUTLIVE_NUDGES_LINGER_S`) after the last one left, so that a page reload or a
reconnecting client does not cost an UNSUBSCRIBE and a SUBSCRIBE. With P API processes, Redis sends
a nudge only to the processes that hold a socket of its tenant, not to all P. A nudge published
while a tenant has no subscription here reaches nobody here, which is harmless: nobody here was
listening, and a client that connects (or reconnects) refetches what it shows before it relies on
nudges. A new subscriber waits (`heard`, bounded) until Redis has confirmed its tenant's
subscription, so anything published after its `subscribe` was answered is delivered.

Channels are plain pub/sub (`SUBSCRIBE`) on one connection, beside the fixed control channel; or,
with `OUTLIVE_NUDGES_SHARDED`, sharded pub/sub (`SSUBSCRIBE`, Redis >= 7) with one connection per
node that owns a subscribed tenant's slot, which is what works on Redis Cluster (`realtime.links`).

A message is parsed once into a `Delivery` that every subscriber of its tenant shares (and that
caches each encoding of it, so a frame is serialized once, not once per socket), and offered to
each subscriber (`realtime.subscribers`: a coalescing buffer, closed with 1013 when it falls too
far behind; a socket's frame is sent from this loop, without a task per socket).

A lost Redis connection is re-established with backoff. When it comes back, the subscribers of
every tenant it carried are closed with 1012 (service restart): whatever was published in between
was missed, and a client's reconnect is what makes it whole. At shutdown, `stop()` closes every
subscriber with 1012 too.

The control channel (token revocations, see `realtime.revocations`) is a fixed channel of the
main Redis connection, subscribed whatever the tenants: `on_control` gets each message, `is_live`
says whether it is subscribed (so that nothing trusts a cache a missed message could have
invalidated), and `on_resubscribed` runs when it comes back. With nudges off
(`OUTLIVE_REALTIME=0`) the hub listens to the control channel only.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from uuid import UUID

from redis.asyncio import Redis

from outlive.realtime.gcfreeze import GcFreezer
from outlive.realtime.links import Link, Sharded
from outlive.realtime.nudges import Nudge
from outlive.realtime.subscribers import (
    CLOSE_RESTART,
    CLOSE_TRY_AGAIN,
    MAX_PENDING,
    Delivery,
    Subscriber,
    SubscriberClosed,
)

__all__ = [  # the subscriber's names, re-exported: callers know them from here
    "CLOSE_RESTART",
    "CLOSE_TRY_AGAIN",
    "MAX_PENDING",
    "Delivery",
    "Hub",
    "Subscriber",
    "SubscriberClosed",
    "hub_client_name",
]
from outlive.telemetry import metrics

log = logging.getLogger(__name__)

LINGER_S = (
    30.0  # OUTLIVE_NUDGES_LINGER_S: a tenant's channel is kept this long after its last socket
)
HEARD_WAIT_S = 2.0  # a new subscriber waits at most this for its tenant's subscription


def hub_client_name() -> str:
    """The name of a hub's Redis connection (`CLIENT LIST`): one per API process."""
    return f"outlive-hub-{socket.gethostname()}-{os.getpid()}"


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
        linger_s: float = LINGER_S,
        sharded: Sharded | None = None,
    ) -> None:
        self._prefix = prefix
        self._max_pending = max_pending
        self._nudges = nudges
        self._control_channel = control_channel
        self._on_control = on_control
        self._on_resubscribed = on_resubscribed
        self._linger_s = linger_s
        self._sharded = sharded
        self._groups: dict[UUID, set[Subscriber]] = {}
        self._links: dict[UUID, Link] = {}  # tenant -> the link that carries its channel
        self._lingering: dict[UUID, asyncio.TimerHandle] = {}
        self._count = 0
        self._watchers: list[asyncio.Future[None]] = []
        self.main = Link(
            redis,
            name="hub",
            fixed=() if control_channel is None else (control_channel,),
            on_message=self._message,
            on_restored=self._main_restored,
        )
        self._nodes: dict[str, Link] = {}  # sharded: one link per cluster node
        self.received = 0
        self.freezer = GcFreezer(lambda: self._count)  # see gcfreeze: no full-GC pause per fan-out

    # --- lifecycle ---------------------------------------------------------------------------

    @property
    def ready(self) -> asyncio.Event:
        """Set while the main connection (and its control channel) is subscribed."""
        return self.main.ready

    def is_live(self) -> bool:
        """Subscribed right now: a control message published now would be heard."""
        return self.main.ready.is_set()

    async def start(self, *, wait_s: float = 2.0) -> None:
        """Subscribe in the background; wait up to `wait_s` for it. Never fails: realtime is
        optional."""
        if self._sharded is not None and self._nudges:
            await self._sharded.discover()
        self.main.start()
        self.freezer.start()
        try:
            async with asyncio.timeout(wait_s):
                await self.main.ready.wait()
        except TimeoutError:
            log.warning("realtime: not subscribed after %.1fs; still trying", wait_s)
        else:
            if self._nudges:
                log.info(
                    "realtime: subscribed to %s<tenant id> for each served tenant (%s pub/sub)",
                    self._prefix,
                    self.mode,
                )
            else:
                log.info("realtime: control channel only (nudges off)")

    @property
    def mode(self) -> str:
        return "sharded" if self._sharded is not None else "plain"

    async def stop(self) -> None:
        """Close every subscriber with 1012 (clients reconnect), then unsubscribe."""
        self.close_all(CLOSE_RESTART, "server shutting down")
        for timer in self._lingering.values():
            timer.cancel()
        self._lingering.clear()
        for link in (self.main, *self._nodes.values()):
            await link.stop()
        if self._sharded is not None:
            await self._sharded.aclose()
        await self.freezer.stop()

    def close_all(self, code: int, reason: str) -> int:
        """Close and unregister every subscriber; their sockets are closed with `code`."""
        subscribers = [s for group in self._groups.values() for s in group]
        for subscriber in subscribers:
            subscriber.close(code, reason)
            self.remove(subscriber)
        return len(subscribers)

    def close_tenant(self, tenant_id: UUID, code: int, reason: str) -> int:
        subscribers = list(self._groups.get(tenant_id, ()))
        for subscriber in subscribers:
            subscriber.close(code, reason)
            self.remove(subscriber)
        return len(subscribers)

    # --- subscribers -------------------------------------------------------------------------

    @property
    def subscriber_count(self) -> int:
        return self._count

    @property
    def tenants(self) -> frozenset[UUID]:
        """The tenants whose channel this process subscribes to (lingering ones included)."""
        return frozenset(self._links)

    def add(self, tenant_id: UUID) -> Subscriber:
        """Register now; the first subscriber of a tenant subscribes to its channel (`heard`
        says when Redis has confirmed it)."""
        subscriber = Subscriber(tenant_id, self._max_pending)
        group = self._groups.setdefault(tenant_id, set())
        if not group:
            self._hold(tenant_id)
        group.add(subscriber)
        self._count += 1
        self._changed()
        return subscriber

    def remove(self, subscriber: Subscriber) -> None:
        """Idempotent. The last subscriber of a tenant leaves its channel `linger_s` later."""
        tenant_id = subscriber.tenant_id
        group = self._groups.get(tenant_id)
        if group is None or subscriber not in group:
            return
        group.discard(subscriber)
        if not group:
            del self._groups[tenant_id]
            self._linger(tenant_id)
        self._count -= 1
        self._changed()

    async def heard(self, tenant_id: UUID, *, wait_s: float = HEARD_WAIT_S) -> bool:
        """Wait (at most `wait_s`) until Redis confirmed the tenant's subscription: a nudge
        published after that reaches this process. False when it did not come in time (Redis
        down: the socket is closed with 1012 when it is back)."""
        link = self._links.get(tenant_id)
        if link is None:
            return False
        try:
            async with asyncio.timeout(wait_s):
                await link.heard(self.channel(tenant_id))
        except TimeoutError:
            return False
        return True

    @asynccontextmanager
    async def subscribe(self, tenant_id: UUID) -> AsyncIterator[Subscriber]:
        subscriber = self.add(tenant_id)
        try:
            await self.heard(tenant_id)
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

    # --- a subscription per served tenant ----------------------------------------------------

    def channel(self, tenant_id: UUID) -> str:
        return f"{self._prefix}{tenant_id}"

    def _hold(self, tenant_id: UUID) -> None:
        timer = self._lingering.pop(tenant_id, None)
        if timer is not None:  # it never left: the subscription is still there
            timer.cancel()
            return
        if not self._nudges or tenant_id in self._links:
            return
        link = self._link_for(tenant_id)
        self._links[tenant_id] = link
        link.want(self.channel(tenant_id))

    def _linger(self, tenant_id: UUID) -> None:
        if tenant_id not in self._links:
            return
        if self._linger_s <= 0:
            self._release(tenant_id)
            return
        loop = asyncio.get_running_loop()
        self._lingering[tenant_id] = loop.call_later(self._linger_s, self._release, tenant_id)

    def _release(self, tenant_id: UUID) -> None:
        self._lingering.pop(tenant_id, None)
        if tenant_id in self._groups:
            return
        link = self._links.pop(tenant_id, None)
        if link is not None:
            link.drop(self.channel(tenant_id))

    def _link_for(self, tenant_id: UUID) -> Link:
        if self._sharded is None:
            return self.main
        node = self._sharded.shards.node_for(self.channel(tenant_id))
        link = self._nodes.get(node)
        if link is None:
            link = self._nodes[node] = Link(
                self._sharded.connect(node),
                name=f"nudges@{node}",
                sharded=True,
                on_message=self._message,
                on_restored=self._restored,
                on_moved=self._moved,
            )
            link.start()
        return link

    def _restored(self, channels: set[str]) -> None:
        """A link is back after a loss: its tenants' sockets may have missed nudges."""
        closed = 0
        for channel in channels:
            tenant_id = self._tenant_of(channel)
            if tenant_id is not None:
                closed += self.close_tenant(tenant_id, CLOSE_RESTART, "realtime restored: refetch")
        if closed:
            log.info("realtime: closed %d socket(s) that may have missed nudges", closed)

    def _main_restored(self, channels: set[str]) -> None:
        """The main connection is back: its tenants' sockets, and the control channel (whose
        announcements may have been missed: `on_resubscribed`)."""
        self._restored(channels)
        if self._on_resubscribed is not None:
            self._on_resubscribed()

    def _moved(self, channel: str) -> None:
        """Sharded: the server took a channel away (its slot moved to another node)."""
        tenant_id = self._tenant_of(channel)
        if tenant_id is None or self._sharded is None:
            return
        self._links.pop(tenant_id, None)
        self._sharded.stale()
        self.close_tenant(tenant_id, CLOSE_RESTART, "realtime moved: refetch")

    def _tenant_of(self, channel: str) -> UUID | None:
        if not channel.startswith(self._prefix):
            return None
        try:
            return UUID(channel[len(self._prefix) :])
        except ValueError:
            return None

    def _message(self, channel: str, data: bytes | str) -> None:
        if channel == self._control_channel:
            if self._on_control is not None:
                try:
                    self._on_control(data)
                except Exception:
                    log.exception("realtime: a control message failed")
            return
        self.received += 1
        self.dispatch(channel, data)

    def dispatch(self, channel: str, data: bytes | str) -> None:
        """Hand one message to its tenant's subscribers (nobody listening: not even parsed)."""
        tenant_id = self._tenant_of(channel)
        if tenant_id is None:
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
