"""The producer: validates a job where it is queued, sends it to saq after the commit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence
from typing import Any, cast

from redis.exceptions import RedisError
from saq.queue import Queue
from saq.queue.redis import RedisQueue

from outlive.config import Settings
from outlive.errors import QueueUnavailable
from outlive.jobs.envelopes import ENVELOPES, Envelope, EnvelopeTypes
from outlive.jobs.queues import OutliveRedisQueue
from outlive.telemetry import tracing

CONSUME_TASK = "consume"
JOB_TIMEOUT_S = 60  # a handler is fire-and-forget work, well inside this
FINISHED_TTL_S = 24 * 3600
# KEYS[1] saq's incomplete set, KEYS[2] the job; ARGV[1] now: re-score a job due later to now.
BRING_FORWARD = """
local due = redis.call('ZSCORE', KEYS[1], KEYS[2])
if due and tonumber(due) > tonumber(ARGV[1]) then
    redis.call('ZADD', KEYS[1], ARGV[1], KEYS[2])
    return 1
end
return 0
"""


class SaqJobProducer:
    def __init__(self, queue: Queue, settings: Settings, types: EnvelopeTypes = ENVELOPES) -> None:
        self.queue = queue
        self.types = types
        self._options: dict[str, Any] = {
            "timeout": JOB_TIMEOUT_S,
            "retries": settings.job_max_attempts,  # saq counts attempts
            "retry_delay": settings.job_retry_base_s,  # the consumer sets each retry's delay
            "retry_backoff": False,  # saq's backoff adds full jitter; ours is exact
            "ttl": FINISHED_TTL_S,
            # The consumer touches the job while its handler runs; a job whose worker died is
            # re-delivered by the sweep after this much silence, not after the whole timeout.
            "heartbeat": max(1, int(settings.run_heartbeat_s)),
        }
        self._timeout_s = settings.queue_timeout_s  # a hung Redis holds no request longer
        self._bring_forward: Any = None

    def build(self, type: str, payload: Mapping[str, Any], *, key: str | None = None) -> Envelope:
        return self.types.build(type, payload, key=key)

    async def send(self, envelopes: Sequence[Envelope], *, delay_s: float = 0.0) -> None:
        try:
            async with asyncio.timeout(self._timeout_s):
                await asyncio.gather(*(self._send(e, delay_s) for e in envelopes))
        except (RedisError, OSError, TimeoutError) as exc:
            raise QueueUnavailable(f"the jobs queue is unreachable: {exc!r}") from exc

    async def bring_forward(self, envelope: Envelope) -> bool:
        """A job scheduled for later (saq keeps it in its `incomplete` sorted set, scored by when
        it is due; 0 once queued) is re-scored to now, and saq's scheduler queues it within its
        1 s tick. One script, so a job that started meanwhile is never touched."""
        try:
            async with asyncio.timeout(self._timeout_s):
                queue = cast(RedisQueue, self.queue)
                if isinstance(queue, OutliveRedisQueue):  # the partition that holds it
                    queue = queue.partition(str(envelope.id))
                moved = await self._bring_forward_script(queue)(
                    keys=[queue.namespace("incomplete"), queue.job_id(str(envelope.id))],
                    args=[time.time()],
                )
                if not moved:
                    await self._send(envelope, 0.0)
        except (RedisError, OSError, TimeoutError) as exc:
            raise QueueUnavailable(f"the jobs queue is unreachable: {exc!r}") from exc
        return bool(moved)

    def _bring_forward_script(self, queue: RedisQueue) -> Any:
        if self._bring_forward is None:
            self._bring_forward = queue.redis.register_script(BRING_FORWARD)
        return self._bring_forward

    async def _send(self, envelope: Envelope, delay_s: float) -> None:
        options = self._options
        if delay_s > 0:
            options = {**options, "scheduled": time.time() + delay_s}
        if not tracing.is_enabled():
            # `body` is not a saq job field, so saq passes it through as the task's argument.
            await self.queue.enqueue(
                CONSUME_TASK, key=str(envelope.id), body=self.types.dump(envelope), **options
            )
            return
        with tracing.span(
            f"{envelope.type} enqueue",
            kind=tracing.SpanKind.PRODUCER,
            attributes={"messaging.system": "saq", "messaging.message.id": str(envelope.id)},
        ):
            traced = envelope.model_copy(update={"traceparent": tracing.current_traceparent()})
            await self.queue.enqueue(
                CONSUME_TASK, key=str(envelope.id), body=self.types.dump(traced), **options
            )
