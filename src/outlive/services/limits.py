"""Named limits shared across workers: `ctx.step(..., limit="llm")`.

A named limit is a request rate, enforced across every worker of the deployment by token buckets
in Redis (the `ratelimits` Lua script: all the step's buckets or none, atomically, in one
`EVALSHA`). A step that names one takes a token from two buckets before each call of its
function: the global one (`OUTLIVE_LIMIT_LLM`, e.g. `60/60`: 60 requests per 60 s) and its
tenant's (the tenant's own rate, `outlive tenant set-limits --llm-rate`, or else the global rate
times `OUTLIVE_LIMIT_TENANT_SHARE`, 0.5 by default: no tenant can use the whole global limit).
The buckets hold one token each and refill at the rate, so requests are spread evenly: in any
window of the rate's length there are at most its count plus one.

Every bucket of a limit shares its hash tag (`outlive:limit:{llm}:…`): the script takes the
global bucket and a tenant's together, so on a Redis Cluster they must share a slot; a limit's
whole traffic is one master's (one script per model call).

A step that finds no token waits, in-process, as long as the script says, holding only its own
worker slot (the wait is interrupted by a cancel like any step), then tries again. A tenant's
rate is read from PostgreSQL at most every `TENANT_RATE_TTL_S` per process. When Redis cannot
be reached the limit is not enforced (the call goes through, and it is logged, throttled): a
model call must not fail because the limiter's store is away; the endpoint's own 429s, retried
with `Retry-After`, are the backstop.

Tokens per minute (`OUTLIVE_LIMIT_LLM_TOKENS`, e.g. `100000/60`) are **reserved before the
call and settled after it** (issue 39, M1). A call reserves what it may use, its prompt's tokens
plus its output cap (`ctx.step(..., reserve=)`; `OUTLIVE_LLM_MAX_OUTPUT_TOKENS` when it says
nothing), from its tenant's token bucket (its own rate, or its share of the global one) and from
the deployment's, atomically with its request tokens; it waits until both hold it. The global
part is at most the tenant's bucket's size, so one call never takes more of the deployment than
the tenant's share. When the call completes, the reservation becomes what it recorded: what it
did not use goes back to both buckets, and what it used **beyond its reservation is charged to
its tenant's bucket alone**, which may go below zero (that tenant's next calls wait; nobody
else's). A failed call keeps its reservation (it may have been billed). So the deployment's
bucket never goes below zero, and another tenant's call never waits for a deficit it did not
make: only for the reservations in flight and the refill. Reserving first also ends bursts: N
calls that see one token between them cannot all start and then spend N answers' worth.

A wait longer than `OUTLIVE_LIMIT_PARK_S` is not made in-process: `acquire` raises `LimitWait`,
and the run parks WAITING on a timer until then (its worker slot and its place under the
tenant's cap are free meanwhile); nothing is reserved then.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass, field
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


# KEYS: token buckets; ARGV: capacity, tokens per millisecond and amount spent of each (negative:
# given back, never past the capacity).
_SPEND = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
for i, key in ipairs(KEYS) do
  local capacity = tonumber(ARGV[3 * i - 2])
  local per_ms = tonumber(ARGV[3 * i - 1])
  local state = redis.call('HMGET', key, 'tokens', 'at')
  local tokens = tonumber(state[1]) or capacity
  local at = tonumber(state[2]) or now
  tokens = math.min(capacity, tokens + math.max(0, now - at) * per_ms)
  tokens = math.min(capacity, tokens - tonumber(ARGV[3 * i]))
  redis.call('HSET', key, 'tokens', tostring(tokens), 'at', now)
  redis.call('PEXPIRE', key, math.ceil((capacity - tokens) / per_ms) + 1000)
end
return 1
"""

Buckets = list[tuple[str, Rate, int]]  # (key, rate, cost: 1 request, or the tokens reserved)


@dataclass(frozen=True, slots=True)
class Reservation:
    """What one call took of the token buckets (`acquire`), to settle once it is over: the
    deployment's bucket and its tenant's, each with the tokens reserved there."""

    tenant_id: TenantId
    name: str
    tokens: Buckets = field(default_factory=list)  # empty: no token limit, or Redis failed


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
        self._default_reserve = settings.llm_max_output_tokens
        # a tenant's own (requests, tokens) rates, and until when they are fresh
        self._tenant_rates: dict[TenantId, tuple[float, tuple[Rate | None, Rate | None]]] = {}
        self._last_failure_log = -FAILURE_LOG_EVERY_S

    async def acquire(
        self, tenant_id: TenantId, name: str, *, tokens: int | None = None
    ) -> Reservation:
        """Wait until one call of `name` is allowed for the tenant and globally, with `tokens`
        (its prompt and output cap; None: `OUTLIVE_LLM_MAX_OUTPUT_TOKENS`) reserved of the token
        limits; `LimitWait` when that is more than `OUTLIVE_LIMIT_PARK_S` away."""
        if name not in KNOWN:
            raise ValueError(f"unknown limit {name!r}; known: {', '.join(KNOWN)}")
        wanted = max(1, self._default_reserve if tokens is None else tokens)
        reserved = await self._tokens(tenant_id, name, wanted)
        buckets = await self._requests(tenant_id, name) + reserved
        while buckets:
            wait_ms = await self._run(self._take_script, buckets, default=-1)
            if wait_ms < 0:  # Redis failed: nothing enforced, nothing reserved
                return Reservation(tenant_id, name)
            if wait_ms == 0:
                break
            if wait_ms > self._park_ms:
                raise LimitWait(name, wait_ms / 1000)
            await asyncio.sleep(min(wait_ms / 1000, MAX_WAIT_S))
        return Reservation(tenant_id, name, reserved)

    async def settle(self, reservation: Reservation, used: int | None) -> None:
        """The call is over: its reservation becomes `used` tokens (None: unknown, a failed call,
        which keeps it). What was not used goes back to both buckets; what was used beyond the
        reservation is charged to the tenant's bucket alone."""
        if used is None:
            return
        tenant_prefix = self._tenant_prefix(reservation.name)
        moves: Buckets = [
            (key, rate, used - held if key.startswith(tenant_prefix) else min(0, used - held))
            for key, rate, held in reservation.tokens
        ]
        if not reservation.tokens:  # nothing was reserved (Redis was away): the tenant's alone
            _, tenant = await self._token_buckets(reservation.tenant_id, reservation.name)
            moves = [] if tenant is None else [(tenant[0], tenant[1], used)]
        moves = [m for m in moves if m[2] != 0]
        if moves:
            await self._run(self._spend_script, moves, default=0)

    async def _requests(self, tenant_id: TenantId, name: str) -> Buckets:
        found: Buckets = []
        if self._global is not None:
            found.append((f"{PREFIX}{{{name}}}:global", self._global, 1))
        own, _ = await self._tenant_rates_of(tenant_id)
        if own is None and self._global is not None:
            own = self._shared(self._global)
        if own is not None:
            found.append((f"{PREFIX}{{{name}}}:tenant:{tenant_id}", own, 1))
        return found

    async def _tokens(self, tenant_id: TenantId, name: str, wanted: int) -> Buckets:
        """The token buckets with what to reserve of each: the tenant's, up to its size, and the
        deployment's, up to the same (one call never takes more of it than the tenant's share)."""
        global_, tenant = await self._token_buckets(tenant_id, name)
        if global_ is None or tenant is None:
            return []
        share = min(wanted, tenant[1].count)
        return [
            (global_[0], global_[1], min(share, global_[1].count)),
            (tenant[0], tenant[1], share),
        ]

    async def _token_buckets(
        self, tenant_id: TenantId, name: str
    ) -> tuple[tuple[str, Rate] | None, tuple[str, Rate] | None]:
        """(key, rate) of the deployment's token bucket and of the tenant's (its own rate, or
        else its share); (None, None) when there is no token limit."""
        if self._global_tokens is None:
            return None, None
        _, own = await self._tenant_rates_of(tenant_id)
        return (
            (f"{PREFIX}{{{name}}}:tokens:global", self._global_tokens),
            (f"{self._tenant_prefix(name)}{tenant_id}", own or self._shared(self._global_tokens)),
        )

    @staticmethod
    def _tenant_prefix(name: str) -> str:
        return f"{PREFIX}{{{name}}}:tokens:tenant:"

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
        for key, rate, cost in buckets:
            # a request bucket holds one token (calls spread evenly); a token bucket the rate's
            capacity = rate.count if ":tokens:" in key else 1
            args += [capacity, rate.count / (rate.per_s * 1000), cost]
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
