"""Redis pub/sub connections whose set of channels follows what the process needs right now.

A `Link` is one pub/sub connection. Its owner says which channels it wants (`want`, `drop`,
synchronous); a background task sends the difference in batches (`SUBSCRIBE a b c …`, or
`SSUBSCRIBE` for sharded pub/sub), and `heard(channel)` resolves once Redis has confirmed the
subscription: a message published after that is delivered. Some channels are `fixed` (the control
channel): the link is `ready` once those are confirmed.

A lost connection is re-made with backoff; when it is back, `on_restored(channels)` names the
channels that were held before and may have missed messages in between (the hub closes their
sockets with 1012: a client's reconnect refetches). A sharded channel can also be taken away by
the server (its slot moved to another node of the cluster): `on_moved(channel)` says so.

A `ShardMap` says which node of a Redis Cluster owns a channel (`CLUSTER SLOTS`, `key_slot`); on
a Redis that is not a cluster, every channel is on the one node of the URL.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Callable, Iterable
from contextlib import suppress
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from redis.asyncio import Redis
from redis.crc import key_slot
from redis.exceptions import RedisError, ResponseError

from outlive.telemetry.daemons import Daemon

log = logging.getLogger(__name__)

IDLE_PING_S = 30.0
BATCH = 500  # channels per SUBSCRIBE command

OnMessage = Callable[[str, bytes | str], None]


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class Link:
    """One pub/sub connection holding a changing set of channels."""

    def __init__(
        self,
        redis: Redis,
        *,
        name: str,
        sharded: bool = False,
        fixed: Iterable[str] = (),
        on_message: OnMessage,
        on_restored: Callable[[set[str]], None] | None = None,
        on_moved: Callable[[str], None] | None = None,
    ) -> None:
        self._redis = redis
        self.name = name
        self._sharded = sharded
        self._sub, self._unsub = (
            ("SSUBSCRIBE", "SUNSUBSCRIBE") if sharded else ("SUBSCRIBE", "UNSUBSCRIBE")
        )
        self._fixed = frozenset(fixed)
        self._on_message = on_message
        self._on_restored = on_restored
        self._on_moved = on_moved
        self._wanted: set[str] = set(self._fixed)
        self._held: set[str] = set()  # SUBSCRIBE sent on this connection, UNSUBSCRIBE not
        self._confirming: dict[str, int] = {}  # SUBSCRIBEs sent and not confirmed yet
        self._unsubscribing: dict[str, int] = {}  # UNSUBSCRIBEs sent and not confirmed yet
        self._waiters: dict[str, list[asyncio.Future[None]]] = {}
        self._dirty = asyncio.Event()
        self._daemon = Daemon(f"outlive-link-{self.name}", self._run, label="outlive-link")
        self._restoring = False
        self.ready = asyncio.Event()
        self.connections = 0  # connections made (for tests: 1 unless one was lost)
        self.subscribe_commands = 0  # SUBSCRIBE/UNSUBSCRIBE commands sent (for tests and benches)

    # --- what the owner asks for -------------------------------------------------------------

    def want(self, channel: str) -> None:
        if channel not in self._wanted:
            self._wanted.add(channel)
            self._dirty.set()

    def drop(self, channel: str) -> None:
        if channel in self._wanted and channel not in self._fixed:
            self._wanted.discard(channel)
            self._dirty.set()

    @property
    def channels(self) -> frozenset[str]:
        """The channels this link wants (held, or about to be)."""
        return frozenset(self._wanted)

    def is_heard(self, channel: str) -> bool:
        """Subscribed and confirmed: a message published now is delivered."""
        return self.ready.is_set() and channel in self._held and not self._confirming.get(channel)

    async def heard(self, channel: str) -> None:
        """Wait until `is_heard(channel)` (the caller bounds the wait)."""
        while not self.is_heard(channel):
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.setdefault(channel, []).append(waiter)
            await waiter

    def _wake(self, channel: str) -> None:
        for waiter in self._waiters.pop(channel, ()):
            if not waiter.done():
                waiter.set_result(None)

    def _wake_all(self) -> None:
        for channel in list(self._waiters):
            self._wake(channel)

    # --- lifecycle ---------------------------------------------------------------------------

    def start(self) -> None:
        self._daemon.start()

    async def stop(self) -> None:
        await self._daemon.stop()

    async def _run(self) -> None:
        delay = 0.5
        connected_before = False
        while True:
            pubsub = self._redis.pubsub()
            try:
                await pubsub.connect()  # type: ignore[no-untyped-call]  # untyped in redis-py
                self.connections += 1
                self._held, self._confirming, self._unsubscribing = set(), {}, {}
                self._restoring = connected_before
                self._dirty.set()
                if not self._fixed:
                    self._now_ready()
                async with asyncio.TaskGroup() as group:
                    group.create_task(self._sync(pubsub))
                    group.create_task(self._listen(pubsub))
            except* (RedisError, OSError) as excs:
                exc = excs.exceptions[0]
                log.warning(
                    "realtime: subscription lost (%s: %s, %s); retrying in ~%.1fs",
                    type(exc).__name__,
                    exc,
                    self.name,
                    delay,
                )
            finally:
                if self.ready.is_set():
                    connected_before, delay = True, 0.5
                self.ready.clear()
                self._held = set()
                self._wake_all()
                with suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
            await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 (jitter)
            delay = min(delay * 2, 15.0)

    def _now_ready(self) -> None:
        """Connected, the fixed channels confirmed: whatever was wanted before a loss may have
        missed messages (`on_restored`)."""
        self.ready.set()
        self._wake_all()
        if self._restoring and self._on_restored is not None:
            self._restoring = False
            self._on_restored(set(self._wanted - self._fixed))

    async def _sync(self, pubsub: Any) -> None:
        """Send what changed since the last round, in batches, in the order it was asked."""
        while True:
            await self._dirty.wait()
            self._dirty.clear()
            add = sorted(self._wanted - self._held)
            remove = sorted(self._held - self._wanted)
            self._held.difference_update(remove)
            for channel in remove:
                self._unsubscribing[channel] = self._unsubscribing.get(channel, 0) + 1
            for chunk in self._batches(remove):
                self.subscribe_commands += 1
                await _send(pubsub, self._unsub, *chunk)
            self._held.update(add)
            for channel in add:
                self._confirming[channel] = self._confirming.get(channel, 0) + 1
            for chunk in self._batches(add):
                self.subscribe_commands += 1
                await _send(pubsub, self._sub, *chunk)

    def _batches(self, channels: list[str]) -> Iterable[list[str]]:
        """`BATCH` channels a command; sharded, those of one hash slot only (a cluster refuses a
        command whose channels are in several slots: CROSSSLOT)."""
        if not self._sharded:
            yield from _chunks(channels)
            return
        by_slot: dict[int, list[str]] = {}
        for channel in channels:
            by_slot.setdefault(key_slot(channel.encode()), []).append(channel)
        for group in by_slot.values():
            yield from _chunks(group)

    async def _listen(self, pubsub: Any) -> None:
        while True:
            message = await pubsub.get_message(timeout=IDLE_PING_S)
            if message is None:
                await _send(pubsub, "PING")  # an idle link that died raises here, and is re-made
                continue
            kind = message["type"]
            if kind in ("message", "smessage"):
                self._on_message(_text(message["channel"]), message["data"])
            elif kind in ("subscribe", "ssubscribe"):
                self._confirmed(_text(message["channel"]))
                if not self.ready.is_set() and all(map(self._confirmed_here, self._fixed)):
                    self._now_ready()
            elif kind in ("unsubscribe", "sunsubscribe"):
                self._unsubscribed(_text(message["channel"]))

    def _confirmed_here(self, channel: str) -> bool:
        return channel in self._held and not self._confirming.get(channel)

    def _confirmed(self, channel: str) -> None:
        left = self._confirming.get(channel, 0) - 1
        if left > 0:
            self._confirming[channel] = left
            return
        self._confirming.pop(channel, None)
        self._wake(channel)

    def _unsubscribed(self, channel: str) -> None:
        pending = self._unsubscribing.get(channel, 0)
        if pending > 1:
            self._unsubscribing[channel] = pending - 1
        elif pending == 1:
            del self._unsubscribing[channel]
        elif channel in self._held:  # not asked for: the server took it (its slot moved)
            self._held.discard(channel)
            self._wanted.discard(channel)
            if self._on_moved is not None:
                self._on_moved(channel)


async def _send(pubsub: Any, *command: str) -> None:
    """Write a command on the pub/sub connection, reading nothing: its reply comes to `_listen`.
    (redis-py's `PubSub.execute_command` runs a health check first, when the connection holds no
    channel it knows of (ours are sent raw), and that check reads a reply: a read beside
    `_listen`'s, which broke the link every `health_check_interval`.)"""
    await pubsub.connection.send_command(*command, check_health=False)


def _chunks(channels: list[str]) -> Iterable[list[str]]:
    for start in range(0, len(channels), BATCH):
        yield channels[start : start + BATCH]


class ShardMap:
    """Which node of a Redis Cluster owns a channel (sharded pub/sub routes by the channel's hash
    slot, as keys do). On a Redis that is not a cluster, every channel is on the URL's node."""

    def __init__(self, url: str) -> None:
        self._url = url
        self._base = urlsplit(url)
        self._ranges: list[tuple[int, int, str]] = []  # (first slot, last slot, "host:port")
        self.clustered = False

    @property
    def default_node(self) -> str:
        return f"{self._base.hostname or '127.0.0.1'}:{self._base.port or 6379}"

    async def refresh(self, redis: Redis) -> None:
        """Read the slot ranges (`CLUSTER SLOTS`); a Redis without cluster mode is one node."""
        try:
            slots = await redis.execute_command("CLUSTER SLOTS")  # type: ignore[no-untyped-call]  # untyped in redis-py
        except ResponseError:  # "This instance has cluster support disabled"
            self._ranges, self.clustered = [], False
            return
        ranges = []
        for first, last, primary, *_ in slots:
            host = _text(primary[0]) or self._base.hostname or "127.0.0.1"
            ranges.append((int(first), int(last), f"{host}:{int(primary[1])}"))
        self._ranges, self.clustered = sorted(ranges), True

    def node_for(self, channel: str) -> str:
        if not self.clustered:
            return self.default_node
        slot = key_slot(channel.encode())
        for first, last, node in self._ranges:
            if first <= slot <= last:
                return node
        raise LookupError(f"no node serves slot {slot} (the cluster is not fully covered)")

    def url_of(self, node: str) -> str:
        """The URL of `node`: this map's URL with its host and port replaced (credentials kept)."""
        if node == self.default_node:
            return self._url
        userinfo = self._base.netloc.rpartition("@")[0]
        netloc = f"{userinfo}@{node}" if userinfo else node
        return urlunsplit(self._base._replace(netloc=netloc, path=""))


class Sharded:
    """Sharded pub/sub's topology: the cluster's slot map and a Redis client per node (made by
    `connect`, the composition root's). On a Redis that is not a cluster, one node."""

    def __init__(self, url: str, connect: Callable[[str], Redis]) -> None:
        self.shards = ShardMap(url)
        self._url = url
        self._connect = connect
        self._clients: dict[str, Redis] = {}
        self._refresh: asyncio.Task[None] | None = None

    def connect(self, node: str) -> Redis:
        client = self._clients.get(node)
        if client is None:
            client = self._clients[node] = self._connect(self.shards.url_of(node))
        return client

    async def discover(self) -> None:
        """Read the slot map now (logged, not raised: until it is known, one node is assumed)."""
        try:
            await self.shards.refresh(self.connect(self.shards.default_node))
        except (RedisError, OSError) as exc:
            log.warning("realtime: cannot read the cluster's slots (%r)", exc)

    def stale(self) -> None:
        """The map is out of date: read it again in the background."""
        if self._refresh is None or self._refresh.done():
            self._refresh = asyncio.create_task(self.discover(), name="outlive-shard-map")

    async def aclose(self) -> None:
        if self._refresh is not None:
            self._refresh.cancel()
            with suppress(asyncio.CancelledError):
                await self._refresh
        for client in self._clients.values():
            with suppress(Exception):
                await client.aclose()
        self._clients.clear()
