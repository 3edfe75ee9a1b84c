"""Per-tenant rate limits: token buckets in Redis, checked and taken by one Lua script.

A bucket holds at most `rate.count` tokens and refills at `rate.count` per `rate.per_s`
seconds; an action takes one token from each of its buckets, all or none, atomically (one
`EVALSHA`, whatever the number of API processes). When any bucket is empty nothing is taken and
`RateLimited` says how many seconds until the emptiest one has a token again: the caller changes
nothing and answers `RATE_LIMITED` with `extensions.retryAfter`.

Buckets are per tenant (and, for invitations, per tenant and recipient; for redeliveries, per
webhook endpoint, which belongs to one tenant): one tenant's use never limits, nor reveals
anything to, another. If Redis cannot be reached the limiter lets the action
through and logs it (throttled): the action itself needs Redis to hand its work off and reports
`QUEUE_UNAVAILABLE` on its own, so refusing here would only put a wrong reason on it.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import math
import time
from dataclasses import dataclass
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError

from outlive.config import Rate
from outlive.errors import RateLimited

log = logging.getLogger(__name__)

PREFIX = "outlive:rate:"
CHECK_TIMEOUT_S = 0.25  # with the enqueue's 0.5 s, a mutation answers within 1 s of a hung Redis
FAILURE_LOG_EVERY_S = 10.0

# KEYS: the buckets; ARGV: capacity, tokens per millisecond and cost of each, in order. A bucket
# of cost 0 (tokens of the named limits, paid after the call) takes nothing but must hold one.
# Returns {1, 0} when `cost` was taken from every bucket, {0, wait_ms} when nothing was.
TAKE = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local levels = {}
local wait = 0
for i, key in ipairs(KEYS) do
  local capacity = tonumber(ARGV[3 * i - 2])
  local per_ms = tonumber(ARGV[3 * i - 1])
  local need = math.max(1, tonumber(ARGV[3 * i]))
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1]) or capacity
  local at = tonumber(state[2]) or now
  tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms)
  levels[i] = tokens
  if tokens < need then
    wait = math.max(wait, math.ceil((need - tokens) / per_ms))
  end
end
if wait > 0 then
  return {0, wait}
end
for i, key in ipairs(KEYS) do
  local cost = tonumber(ARGV[3 * i])
  if cost > 0 then
    local capacity = tonumber(ARGV[3 * i - 2])
    local per_ms = tonumber(ARGV[3 * i - 1])
    redis.call('HSET', key, 'tokens', tostring(levels[i] - cost), 'at', now)
    redis.call('PEXPIRE', key, math.ceil(capacity / per_ms) + 1000)
  end
end
return {1, 0}
"""


@dataclass(frozen=True, slots=True)
class Bucket:
    """One limit on one subject: `what` names the action, `subject` whose bucket it is. `owner`
    (default: the subject) is the hash tag of its key: buckets taken together share it (a
    tenant's, and its recipients' or endpoints'), so on a Redis Cluster they share a slot."""

    what: str
    subject: str
    rate: Rate | None  # None: no limit
    owner: str | None = None

    @property
    def key(self) -> str:
        return f"{PREFIX}{{{self.owner or self.subject}}}:{self.what}:{self.subject}"


START_RUN = "start-run"


def start_run_bucket(tenant_id: object, rate: Rate | None) -> Bucket:
    """The tenant's `OUTLIVE_RATE_START_RUN` bucket: `startRun`, `retryRun` and every run a
    `replayRuns` starts take from the same one."""
    return Bucket(START_RUN, str(tenant_id), rate)


def private_subject(*parts: str) -> str:
    """A bucket subject that does not spell out what it is made of (an email address)."""
    return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:32]


class RateLimiter:
    def __init__(self, redis: Redis) -> None:
        self._redis = redis
        self._script: Any = redis.register_script(TAKE)
        self._last_failure_log = -FAILURE_LOG_EVERY_S

    async def take(self, *buckets: Bucket, message: str) -> None:
        """One token from each bucket, or `RateLimited(message)` and nothing taken."""
        wait_ms = await self._try(buckets, cost=1)
        if wait_ms:
            raise RateLimited(message, retry_after=max(1, math.ceil(wait_ms / 1000)))

    async def wait_to_take(self, bucket: Bucket, cost: int) -> float:
        """Take `cost` tokens (at most the bucket's capacity) and answer 0, or take nothing and
        answer the seconds until they are there: for work that waits rather than fails."""
        return await self._try((bucket,), cost=cost) / 1000

    async def _try(self, buckets: tuple[Bucket, ...], *, cost: int) -> int:
        """The milliseconds to wait (0: taken; also when Redis failed: not enforced then)."""
        limited = [b for b in buckets if b.rate is not None]
        if not limited:
            return 0
        args: list[float] = []
        for bucket in limited:
            assert bucket.rate is not None  # noqa: S101 (filtered above)
            rate = bucket.rate
            args += [rate.count, rate.count / (rate.per_s * 1000), min(cost, rate.count)]
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):  # a Redis that hangs holds nothing up
                taken, wait_ms = await self._script(keys=[b.key for b in limited], args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            self._log_failure(exc)
            return 0
        return 0 if taken else max(1, int(wait_ms))

    async def admits(self, *buckets: Bucket) -> bool:
        """`take` for work that waits rather than fails: True when a token was taken from each."""
        try:
            await self.take(*buckets, message="rate limited")
        except RateLimited:
            return False
        return True

    def _log_failure(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_EVERY_S:
            self._last_failure_log = now
            log.warning("rate limits not checked, Redis failed (%r): letting actions through", exc)
