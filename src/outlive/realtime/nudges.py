"""The typed nudge and the one function that publishes it.

A nudge carries only `type`, `tenantId`, `at` and an optional `id` (contract §5), never row data:
a client that hears one re-queries, so the database stays the only source of truth. Publishing is
always after the commit (the unit of work hands its collected nudges to a sink) and is optional by
design: with `OUTLIVE_REALTIME=0`, or with Redis pub/sub unreachable, it logs and does nothing, and
every mutation still succeeds.

`Publisher.send` is the one function that puts nudges on the wire: it takes `Nudge` models and
nothing else. One sink feeds it what a unit of work collected, stamped with the commit time:
`Publisher.defer`, in every process. The unit returns at once; its nudges join the process's
queue, and one task sends what is queued, in order, a pipeline at a time (up to `MAX_BATCH`), so
whatever units commit while a send is on the wire ride the next one together. A failure is
logged and counted, not raised; `drain()` waits for the queue at shutdown.

Until 2026-12-07 a worker awaited its own publish after each commit: a Redis round trip on every
step's path, and a pipeline per unit. `py-spy` on a worker running 1,000 10-step workflows found
12 % of its samples under `Publisher.publish`; the 32 runs in flight at once now share a
pipeline, and a step no longer waits for Redis (docs/measurements.md, "Nudges off the step's
path"). A nudge a crash loses on the way is harmless (contract §5): clients refetch on reconnect.

A new nudge type is one more member of `NudgeType`; an unknown type never reaches Redis.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Literal, Protocol, cast, get_args
from uuid import UUID

from redis.asyncio import Redis
from redis.exceptions import RedisError, ResponseError

from outlive.telemetry import metrics, tracing

if TYPE_CHECKING:
    from outlive.realtime.links import Sharded

log = logging.getLogger(__name__)

NudgeType = Literal[
    "run.created",
    "run.updated",
    "run.event",
    "invitation.updated",
    "webhook.delivery.updated",
    "replay.updated",
    "member.updated",
    "budget.updated",
    "schedule.updated",
]
NUDGE_TYPES: frozenset[str] = frozenset(get_args(NudgeType))

PUBLISH_TIMEOUT_S = 2.0
# Nudges of these types are sent at most once per window per (tenant, type, id) by a process:
# the first at once, the last of a burst when its window ends (so the final state is announced).
THROTTLED: dict[str, float] = {"budget.updated": 1.0}
MAX_THROTTLED = 10_000
MAX_BATCH = 1_000  # nudges in one pipeline
MAX_QUEUED = 100_000  # nudges held while Redis is slow to answer; past that, the oldest drop
FAILURE_LOG_EVERY_S = 10.0


class PendingNudge(Protocol):
    """What a unit of work collected (`outlive.db.tx.PendingNudge` has this shape)."""

    @property
    def type(self) -> str: ...
    @property
    def tenant_id(self) -> UUID: ...
    @property
    def id(self) -> UUID | None: ...


@dataclass(frozen=True, slots=True)
class Nudge:
    """Contract §5: what changed (type and maybe id), for which tenant, and when. Nothing else."""

    type: NudgeType
    tenant_id: UUID
    at: datetime
    id: UUID | None = None

    def __post_init__(self) -> None:
        if self.type not in NUDGE_TYPES:
            raise ValueError(f"unknown nudge type {self.type!r}")
        if self.at.tzinfo is None:
            raise ValueError("a nudge's time must carry its offset")

    @classmethod
    def of(cls, pending: PendingNudge, at: datetime) -> Nudge:
        """A unit of work's pending nudge, stamped; raises `ValueError` for an unknown type."""
        if pending.type not in NUDGE_TYPES:
            raise ValueError(f"unknown nudge type {pending.type!r}")
        return cls(cast(NudgeType, pending.type), pending.tenant_id, at, pending.id)

    def to_graphql(self) -> dict[str, str | None]:
        """The GraphQL `Nudge` object, keys and values as clients receive them."""
        return {
            "type": self.type,
            "tenantId": str(self.tenant_id),
            "at": self.at.isoformat(),
            "id": None if self.id is None else str(self.id),
        }

    def to_wire(self) -> str:
        """The Redis message: the GraphQL object itself, so a hub never re-formats a value."""
        return json.dumps(self.to_graphql(), separators=(",", ":"))

    @classmethod
    def from_wire(cls, raw: bytes | str) -> Nudge:
        """Raises `ValueError` (or `KeyError`/`TypeError`) on anything but a well-formed nudge."""
        data = json.loads(raw)
        raw_id = data.get("id")
        return cls(
            type=data["type"],
            tenant_id=UUID(data["tenantId"]),
            at=datetime.fromisoformat(data["at"]),
            id=None if raw_id is None else UUID(raw_id),
        )


def channel_prefix(redis_url: str) -> str:
    """Pub/sub ignores Redis db numbers; the prefix keeps two deployments on one server apart."""
    from redis.connection import parse_url

    if "+cluster://" in redis_url:  # a cluster has db 0 only
        return "outlive:0:nudges:"
    db = parse_url(redis_url).get("db", 0)  # type: ignore[no-untyped-call]  # untyped in redis-py
    return f"outlive:{db}:nudges:"


class Publisher:
    """Publishes nudges on `<prefix><tenant id>`; a no-op (that says so) when realtime is off."""

    def __init__(
        self,
        redis: Redis | None,
        *,
        prefix: str,
        enabled: bool = True,
        sharded: Sharded | None = None,
    ) -> None:
        self._redis = redis
        self._prefix = prefix
        self._sharded = sharded
        self.enabled = enabled and redis is not None
        self._queued: deque[Nudge] = deque(maxlen=MAX_QUEUED)  # stamped, for the sender
        self._in_flight = 0
        self._sender: asyncio.Task[None] | None = None
        self._last_sent: dict[tuple[UUID, str, UUID | None], float] = {}  # `THROTTLED` keys
        self._trailing: set[tuple[UUID, str, UUID | None]] = set()
        self._last_failure_log = -FAILURE_LOG_EVERY_S
        self._unlogged_failures = 0
        self.sent = 0
        self.failures = 0
        if not self.enabled:
            log.info("realtime is off (OUTLIVE_REALTIME=0): no nudges; clients refresh on fetch")

    def channel(self, tenant_id: UUID) -> str:
        return f"{self._prefix}{tenant_id}"

    async def send(self, nudges: Sequence[Nudge]) -> None:
        """The one way a nudge leaves the process. Never raises for Redis: logs, and the caller's
        change stands (clients refresh on their next fetch)."""
        if not self.enabled or not nudges or self._redis is None:
            return
        with tracing.span(
            "nudge publish",
            kind=tracing.SpanKind.PRODUCER,
            attributes={"outlive.nudge.count": len(nudges)},
        ):
            await self._send(nudges)

    async def _send(self, nudges: Sequence[Nudge]) -> None:
        assert self._redis is not None  # noqa: S101 (checked by send)
        try:
            async with asyncio.timeout(PUBLISH_TIMEOUT_S):  # a Redis that hangs holds nothing up
                if self._sharded is None:
                    async with self._redis.pipeline(transaction=False) as pipe:
                        for nudge in nudges:
                            pipe.publish(self.channel(nudge.tenant_id), nudge.to_wire())
                        await pipe.execute()
                else:
                    await self._spublish(self._sharded, nudges)
        except (RedisError, OSError, TimeoutError, LookupError) as exc:
            metrics.NUDGES_DROPPED.inc(len(nudges))
            self._log_failure(exc, len(nudges))
        else:
            self.sent += len(nudges)
            for nudge in nudges:
                metrics.NUDGES_PUBLISHED.labels(nudge.type).inc()

    async def _spublish(self, sharded: Sharded, nudges: Sequence[Nudge]) -> None:
        """Sharded pub/sub: `SPUBLISH` each nudge to the node that owns its channel's slot, a
        pipeline per node. A slot that moved (MOVED) marks the map stale, and the nudges fail."""
        by_node: dict[str, list[Nudge]] = {}
        for nudge in nudges:
            node = sharded.shards.node_for(self.channel(nudge.tenant_id))
            by_node.setdefault(node, []).append(nudge)
        try:
            for node, mine in by_node.items():
                async with sharded.connect(node).pipeline(transaction=False) as pipe:
                    for nudge in mine:
                        pipe.execute_command(
                            "SPUBLISH", self.channel(nudge.tenant_id), nudge.to_wire()
                        )
                    await pipe.execute()
        except ResponseError:
            sharded.stale()
            raise

    async def defer(self, pending: Sequence[PendingNudge]) -> None:
        """The sink of every unit of work: stamp now, queue, return at once (see above)."""
        if self.enabled and pending:
            self._queue(self._throttled(self._stamp(pending)))

    def _queue(self, nudges: Sequence[Nudge]) -> None:
        if not nudges:
            return
        over = len(self._queued) + len(nudges) - MAX_QUEUED
        self._queued.extend(nudges)  # bounded: past `MAX_QUEUED` the oldest drop
        if over > 0:  # Redis has been slow for a while
            metrics.NUDGES_DROPPED.inc(over)
            self._log_failure(OverflowError("the nudge queue is full"), over)
        self._start()

    def _start(self) -> None:
        """One sender at a time, so that nudges leave in the order they were queued."""
        if self._queued and (self._sender is None or self._sender.done()):
            self._sender = asyncio.create_task(self._send_queued(), name="outlive-nudge-publish")
            self._sender.add_done_callback(self._done)

    async def _send_queued(self) -> None:
        """What is queued, in order, a batch at a time, until nothing is."""
        while self._queued:
            batch = [self._queued.popleft() for _ in range(min(len(self._queued), MAX_BATCH))]
            self._in_flight = len(batch)
            try:
                await self.send(batch)
            finally:
                self._in_flight = 0

    def _throttled(self, nudges: Sequence[Nudge]) -> list[Nudge]:
        """The nudges to send now (`THROTTLED`): one sent within its window is held back, and
        one nudge of that key is sent when the window ends."""
        if not any(n.type in THROTTLED for n in nudges):
            return list(nudges)
        now, out = time.monotonic(), []
        for nudge in nudges:
            window = THROTTLED.get(nudge.type)
            key = (nudge.tenant_id, nudge.type, nudge.id)
            last = self._last_sent.get(key)
            if window is None or last is None or now - last >= window:
                if window is not None:
                    self._last_sent[key] = now
                out.append(nudge)
            elif key not in self._trailing:
                self._trailing.add(key)
                loop = asyncio.get_running_loop()
                loop.call_later(window - (now - last), self._trail, key, nudge)
        return out

    def _trail(self, key: tuple[UUID, str, UUID | None], nudge: Nudge) -> None:
        self._trailing.discard(key)
        self._last_sent[key] = time.monotonic()
        if len(self._last_sent) > MAX_THROTTLED:  # forget keys whose window is long over
            horizon = time.monotonic() - max(THROTTLED.values())
            for old in [k for k, at in self._last_sent.items() if at < horizon]:
                del self._last_sent[old]
        self._queue([Nudge(nudge.type, nudge.tenant_id, datetime.now(UTC), nudge.id)])

    @staticmethod
    def _stamp(pending: Sequence[PendingNudge]) -> list[Nudge]:
        at = datetime.now(UTC)
        return [p if isinstance(p, Nudge) else Nudge.of(p, at) for p in pending]

    def _done(self, task: asyncio.Task[None]) -> None:
        """A sender ended (once per sender: `drain` may call it before its callback runs). What
        was queued as it ended goes with the next one; after a cancel (shutdown), nothing."""
        if self._sender is not task:
            return
        self._sender = None
        if task.cancelled():
            return
        if (exc := task.exception()) is not None:
            log.error("nudge publish failed", exc_info=exc)
        self._start()

    def _log_failure(self, exc: BaseException, count: int) -> None:
        self.failures += count
        self._unlogged_failures += count
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_EVERY_S:
            log.warning(
                "realtime publish failed (%r): %d nudge(s) dropped; the change stands and "
                "clients refresh on their next fetch",
                exc,
                self._unlogged_failures,
            )
            self._last_failure_log = now
            self._unlogged_failures = 0

    @property
    def pending(self) -> int:
        """Nudges queued or on the wire."""
        return len(self._queued) + self._in_flight

    async def drain(self) -> None:
        """Wait until every queued nudge was sent or dropped (at shutdown, and in tests)."""
        while (sender := self._sender) is not None:
            await asyncio.wait({sender})
            self._done(sender)
