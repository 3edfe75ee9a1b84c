"""Named limits shared across workers: `ctx.step(..., limit="llm")`.

A named limit is a request rate, enforced across every worker of the deployment by token buckets
in Redis (the `ratelimits` Lua script: all the step's buckets or none, atomically, in one
`EVALSHA`). A step that names one takes a token from two buckets before each call of its
function: the global one (`OUTLIVE_LIMIT_LLM`, e.g. `60/60`: 60 requests per 60 s) and its
tenant's (the tenant's own rate, `outlive tenant set-limits --llm-rate`, or else the global rate
times `OUTLIVE_LIMIT_TENANT_SHARE`, 0.5 by default: no tenant can use the whole global limit).
The buckets hold one token each and refill at the rate, so requests are spread evenly: in any
window of the rate's length there are at most its count plus one.

A step that finds no token waits, in-process, as long as the script says, holding only its own
worker slot (the wait is interrupted by a cancel like any step), then tries again. A tenant's
rate is read from PostgreSQL at most every `TENANT_RATE_TTL_S` per process. When Redis cannot
be reached the limit is not enforced (the call goes through, and it is logged, throttled): a
model call must not fail because the limiter's store is away; the endpoint's own 429s, retried
with `Retry-After`, are the backstop.

Tokens per minute (`OUTLIVE_LIMIT_LLM_TOKENS`, e.g. `100000/60`) are counted after the call,
since only the answer says how many it used: a step's recorded usage (input plus output tokens)
is spent from the deployment's token bucket and its tenant's (a share of it, as above), which may
go below zero. A call waits until both are above zero again, so a large answer delays the calls
after it, never the one that made it. A wait longer than `OUTLIVE_LIMIT_PARK_S` is not made
in-process: `acquire` raises `LimitWait`, and the run parks WAITING on a timer until then (its
worker slot and its place under the tenant's cap are free meanwhile).
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import Any

from redis.asyncio import Redis
from redis.exceptions import RedisError
from sqlalchemy import text

from outlive.config import Rate, Settings
from outlive.db.raw import prepare
from outlive.db.tx import Sessions, UnitOfWork
from outlive.errors import BadUserInput, LimitWait, NotFound
from outlive.ids import TenantId
from outlive.services.ratelimits import TAKE

log = logging.getLogger(__name__)

PREFIX = "outlive:limit:"
KNOWN = ("llm",)
TENANT_RATE_TTL_S = 10.0
CHECK_TIMEOUT_S = 0.25
FAILURE_LOG_EVERY_S = 10.0
MAX_WAIT_S = 5.0  # one wait; the step then asks again (its cancel is seen meanwhile anyway)

_TENANT_RATES = prepare(text("SELECT llm_rate, llm_token_rate FROM tenants WHERE id = :tenant_id"))
_SET_TENANT_RATE = prepare(
    text("UPDATE tenants SET llm_rate = :rate WHERE slug = :slug RETURNING id, slug, llm_rate")
)
_SET_TENANT_TOKEN_RATE = prepare(
    text("UPDATE tenants SET llm_token_rate = :rate WHERE slug = :slug RETURNING slug")
)


# KEYS: token buckets; ARGV: capacity, tokens per millisecond and amount spent of each.
_SPEND = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
for i, key in ipairs(KEYS) do
  local capacity = tonumber(ARGV[3 * i - 2])
  local per_ms = tonumber(ARGV[3 * i - 1])
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1]) or capacity
  local at = tonumber(state[2]) or now
  tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms) - tonumber(ARGV[3 * i])
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', now)
  redis.call('PEXPIRE', key, math.ceil((capacity - tokens) / per_ms) + 1000)
end
return 1
"""

Buckets = list[tuple[str, Rate, int]]  # (key, rate, cost: 1 request, or 0 for a token bucket)


class NamedLimits:
    """The `outlive.workflows.calls.Limits` a worker gives its attempts."""

    def __init__(self, redis: Redis, sessions: Sessions, settings: Settings) -> None:
        self._take_script: Any = redis.register_script(TAKE)
        self._spend_script: Any = redis.register_script(_SPEND)
        self._sessions = sessions
        self._global = settings.limit_llm
        self._global_tokens = settings.limit_llm_tokens
        self._share = settings.limit_tenant_share
        self._park_ms = settings.limit_park_s * 1000
        # a tenant's own (requests, tokens) rates, and until when they are fresh
        self._tenant_rates: dict[TenantId, tuple[float, tuple[Rate | None, Rate | None]]] = {}
        self._last_failure_log = -FAILURE_LOG_EVERY_S

    async def acquire(self, tenant_id: TenantId, name: str) -> None:
        """Wait until one call of `name` is allowed for the tenant and globally; `LimitWait`
        when that is more than `OUTLIVE_LIMIT_PARK_S` away."""
        if name not in KNOWN:
            raise ValueError(f"unknown limit {name!r}; known: {', '.join(KNOWN)}")
        buckets = await self._requests(tenant_id, name) + await self._tokens(tenant_id, name)
        while buckets:
            wait_ms = await self._run(self._take_script, buckets, default=0)
            if wait_ms <= 0:
                return
            if wait_ms > self._park_ms:
                raise LimitWait(name, wait_ms / 1000)
            await asyncio.sleep(min(wait_ms / 1000, MAX_WAIT_S))

    async def spend(self, tenant_id: TenantId, name: str, tokens: int) -> None:
        """Count `tokens` (a call's usage) against the token limits of `name`."""
        buckets = [(key, rate, tokens) for key, rate, _ in await self._tokens(tenant_id, name)]
        if buckets and tokens > 0:
            await self._run(self._spend_script, buckets, default=0)

    async def _requests(self, tenant_id: TenantId, name: str) -> Buckets:
        found: Buckets = []
        if self._global is not None:
            found.append((f"{PREFIX}{name}:global", self._global, 1))
        own, _ = await self._tenant_rates_of(tenant_id)
        if own is None and self._global is not None:
            own = self._shared(self._global)
        if own is not None:
            found.append((f"{PREFIX}{name}:tenant:{tenant_id}", own, 1))
        return found

    async def _tokens(self, tenant_id: TenantId, name: str) -> Buckets:
        """The token buckets: the deployment's, and the tenant's own rate or else its share."""
        if self._global_tokens is None:
            return []
        _, own = await self._tenant_rates_of(tenant_id)
        return [
            (f"{PREFIX}{name}:tokens:global", self._global_tokens, 0),
            (
                f"{PREFIX}{name}:tokens:tenant:{tenant_id}",
                own or self._shared(self._global_tokens),
                0,
            ),
        ]

    def _shared(self, rate: Rate) -> Rate:
        return Rate(max(1, int(rate.count * self._share)), rate.per_s)

    async def _tenant_rates_of(self, tenant_id: TenantId) -> tuple[Rate | None, Rate | None]:
        """The tenant's own (requests, tokens) rates, read at most every `TENANT_RATE_TTL_S`."""
        now = time.monotonic()
        cached = self._tenant_rates.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self._sessions.unit(tenant_id, single_statement=True) as uow:
            row = await uow.one(_TENANT_RATES, tenant_id=tenant_id)
        rates = (
            _rate(None if row is None else row["llm_rate"]),
            _rate(None if row is None else row["llm_token_rate"]),
        )
        self._tenant_rates[tenant_id] = (now + TENANT_RATE_TTL_S, rates)
        return rates

    async def _run(self, script: Any, buckets: Buckets, *, default: int) -> int:
        """The script over `buckets`: the milliseconds to wait (0: taken), or `default` when
        Redis failed (the limit is not enforced then)."""
        args: list[float] = []
        for _, rate, cost in buckets:
            # a request bucket holds one token (calls spread evenly); a token bucket the rate's
            args += [1 if cost else rate.count, rate.count / (rate.per_s * 1000), cost]
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                answer = await script(keys=[k for k, _, _ in buckets], args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            self._log_failure(exc)
            return default
        if not isinstance(answer, list):
            return 0  # `_SPEND`
        taken, wait_ms = answer
        return 0 if taken else max(1, int(wait_ms))

    def _log_failure(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_EVERY_S:
            self._last_failure_log = now
            log.warning("named limits not enforced, Redis failed (%r): letting calls through", exc)


def _rate(raw: str | None) -> Rate | None:
    parsed = Rate.parse(raw) if raw else None
    return parsed if isinstance(parsed, Rate) else None


async def set_llm_token_rate(uow: UnitOfWork, *, tenant_slug: str, rate: Rate | None) -> str:
    """A tenant's own token rate of the `llm` limit (None: its share of the global one)."""
    row = await uow.one(
        _SET_TENANT_TOKEN_RATE, slug=tenant_slug, rate=None if rate is None else str(rate)
    )
    if row is None:
        raise NotFound(f"no tenant {tenant_slug!r}")
    return str(row["slug"])


async def set_llm_rate(uow: UnitOfWork, *, tenant_slug: str, rate: Rate | None) -> str:
    """A tenant's own `llm` rate (None: the share of the global one); its slug back."""
    row = await uow.one(
        _SET_TENANT_RATE, slug=tenant_slug, rate=None if rate is None else str(rate)
    )
    if row is None:
        raise NotFound(f"no tenant {tenant_slug!r}")
    return str(row["slug"])


def parse_rate(value: str) -> Rate | None:
    """`N/S` or `default` (None)."""
    if value.strip().lower() == "default":
        return None
    try:
        parsed = Rate.parse(value)
    except ValueError as exc:
        raise BadUserInput(str(exc)) from None
    if not isinstance(parsed, Rate):
        raise BadUserInput(f"{value!r}: write N/S (N requests per S seconds) or default")
    return parsed
