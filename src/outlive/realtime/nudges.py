"""The typed nudge and the one function that publishes it.

A nudge carries only `type`, `tenantId`, `at` and an optional `id` (contract §5), never row data:
a client that hears one re-queries, so the database stays the only source of truth. Publishing is
always after the commit (the unit of work hands its collected nudges to a sink) and is optional by
design: with `OUTLIVE_REALTIME=0`, or with Redis pub/sub unreachable, it logs and does nothing, and
every mutation still succeeds.

On the request path the sink is `Publisher.defer`: the publish runs as a tracked background task,
never awaited by the response; its failure is logged, not lost. In a worker it is
`Publisher.publish`, awaited after the commit.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal, Protocol
from uuid import UUID

from redis.asyncio import Redis
from redis.exceptions import RedisError


class PendingNudge(Protocol):
    """What a unit of work collected (`outlive.db.tx.PendingNudge` has this shape)."""

    @property
    def type(self) -> str: ...
    @property
    def tenant_id(self) -> UUID: ...
    @property
    def id(self) -> UUID | None: ...


log = logging.getLogger(__name__)

NudgeType = Literal[
    "run.created",
    "run.updated",
    "run.event",
    "invitation.updated",
    "webhook.delivery.updated",
]
NUDGE_TYPES: frozenset[str] = frozenset(NudgeType.__args__)  # type: ignore[attr-defined]


@dataclass(frozen=True, slots=True)
class Nudge:
    type: str
    tenant_id: UUID
    at: datetime
    id: UUID | None = None

    def to_wire(self) -> dict[str, Any]:
        return {
            "type": self.type,
            "tenantId": str(self.tenant_id),
            "at": self.at.isoformat(),
            "id": None if self.id is None else str(self.id),
        }

    @classmethod
    def from_wire(cls, raw: bytes | str) -> Nudge:
        data = json.loads(raw)
        return cls(
            type=str(data["type"]),
            tenant_id=UUID(data["tenantId"]),
            at=datetime.fromisoformat(data["at"]),
            id=UUID(data["id"]) if data.get("id") else None,
        )


def channel_prefix(redis_url: str) -> str:
    """Pub/sub ignores Redis db numbers; the prefix keeps two deployments on one server apart."""
    from redis.connection import parse_url

    db = parse_url(redis_url).get("db", 0)  # type: ignore[no-untyped-call]  # untyped in redis-py
    return f"outlive:{db}:nudges:"


class Publisher:
    def __init__(self, redis: Redis | None, *, prefix: str, enabled: bool = True) -> None:
        self._redis = redis
        self._prefix = prefix
        self._enabled = enabled and redis is not None
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_failure_log = 0.0
        self.failures = 0
        if not self._enabled:
            log.info("realtime is off: nudges are not published; clients refresh on fetch")

    def channel(self, tenant_id: UUID) -> str:
        return f"{self._prefix}{tenant_id}"

    async def publish(self, pending: Sequence[PendingNudge]) -> None:
        """Publish now (awaited): the sink for workers and jobs."""
        if not self._enabled or not pending or self._redis is None:
            return
        at = datetime.now(UTC)
        try:
            async with self._redis.pipeline(transaction=False) as pipe:
                for p in pending:
                    if p.type not in NUDGE_TYPES:
                        raise ValueError(f"unknown nudge type {p.type!r}")
                    nudge = Nudge(type=p.type, tenant_id=p.tenant_id, at=at, id=p.id)
                    pipe.publish(self.channel(p.tenant_id), json.dumps(nudge.to_wire()))
                await pipe.execute()
        except (RedisError, OSError) as exc:
            self._log_failure(exc)

    async def defer(self, pending: Sequence[PendingNudge]) -> None:
        """Schedule the publish and return at once: the sink for the request path."""
        if not self._enabled or not pending:
            return
        task = asyncio.create_task(self.publish(list(pending)))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.error("nudge publish failed", exc_info=task.exception())

    def _log_failure(self, exc: BaseException) -> None:
        self.failures += 1
        now = time.monotonic()
        if now - self._last_failure_log > 10:
            self._last_failure_log = now
            log.warning(
                "realtime publish failed (%r); mutations go on, clients refresh on fetch", exc
            )

    async def drain(self) -> None:
        """Wait for deferred publishes (at shutdown)."""
        if self._tasks:
            await asyncio.gather(*self._tasks, return_exceptions=True)
