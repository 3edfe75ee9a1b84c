"""One Redis subscription per process, fanned out in-process by tenant.

Each API process holds a single pattern subscription on the nudge channels, whatever the number of
sockets. A subscriber is a small coalescing buffer: a stalled socket holds at most one pending
nudge per (type, id) — a newer one replaces the older — so memory never grows with a slow client,
and what it receives when it wakes is still enough to know what to re-query. A lost Redis
connection is re-established with backoff; clients refetch on reconnect anyway.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, suppress
from uuid import UUID

from redis.asyncio import Redis
from redis.exceptions import RedisError

from outlive.realtime.nudges import Nudge

log = logging.getLogger(__name__)


class Subscriber:
    __slots__ = ("_pending", "_wake", "tenant_id")

    def __init__(self, tenant_id: UUID) -> None:
        self.tenant_id = tenant_id
        self._pending: dict[tuple[str, UUID | None], Nudge] = {}
        self._wake = asyncio.Event()

    def offer(self, nudge: Nudge) -> None:
        key = (nudge.type, nudge.id)
        self._pending.pop(key, None)  # the newest copy goes to the back of the line
        self._pending[key] = nudge
        self._wake.set()

    @property
    def backlog(self) -> int:
        return len(self._pending)

    async def next(self) -> Nudge:
        while not self._pending:
            self._wake.clear()
            await self._wake.wait()
        key = next(iter(self._pending))
        return self._pending.pop(key)


class Hub:
    def __init__(self, redis: Redis, *, prefix: str) -> None:
        self._redis = redis
        self._prefix = prefix
        self._subscribers: dict[UUID, set[Subscriber]] = {}
        self._task: asyncio.Task[None] | None = None
        self.ready = asyncio.Event()
        self.received = 0

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outlive-realtime-hub")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with suppress(asyncio.CancelledError):
                await self._task

    @property
    def subscriber_count(self) -> int:
        return sum(len(s) for s in self._subscribers.values())

    @asynccontextmanager
    async def subscribe(self, tenant_id: UUID) -> AsyncIterator[Subscriber]:
        subscriber = Subscriber(tenant_id)
        self._subscribers.setdefault(tenant_id, set()).add(subscriber)
        try:
            yield subscriber
        finally:
            group = self._subscribers.get(tenant_id)
            if group is not None:
                group.discard(subscriber)
                if not group:
                    del self._subscribers[tenant_id]

    def dispatch(self, channel: str, data: bytes | str) -> None:
        tenant_text = channel[len(self._prefix) :]
        try:
            tenant_id = UUID(tenant_text)
            group = self._subscribers.get(tenant_id)
            if not group:
                return
            nudge = Nudge.from_wire(data)
        except (ValueError, KeyError):
            log.warning("ignoring a malformed nudge on %s", channel)
            return
        if nudge.tenant_id != tenant_id:
            log.warning("ignoring a nudge whose tenant does not match its channel")
            return
        for subscriber in group:
            subscriber.offer(nudge)

    async def _run(self) -> None:
        delay = 0.5
        while True:
            pubsub = self._redis.pubsub(ignore_subscribe_messages=True)
            try:
                await pubsub.psubscribe(f"{self._prefix}*")
                self.ready.set()
                delay = 0.5
                async for message in pubsub.listen():
                    if message["type"] == "pmessage":
                        self.received += 1
                        channel = message["channel"]
                        if isinstance(channel, bytes):
                            channel = channel.decode()
                        self.dispatch(channel, message["data"])
            except (RedisError, OSError) as exc:
                self.ready.clear()
                log.warning("realtime subscription lost (%r); retrying in %.1fs", exc, delay)
            finally:
                with suppress(Exception):
                    await pubsub.aclose()  # type: ignore[no-untyped-call]  # untyped in redis-py
            await asyncio.sleep(delay * (0.5 + random.random()))  # noqa: S311 (jitter)
            delay = min(delay * 2, 15.0)
