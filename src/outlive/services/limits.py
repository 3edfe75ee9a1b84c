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
from outlive.errors import BadUserInput, NotFound
from outlive.ids import TenantId
from outlive.services.ratelimits import TAKE_SCRIPT

log = logging.getLogger(__name__)

PREFIX = "outlive:limit:"
KNOWN = ("llm",)
TENANT_RATE_TTL_S = 10.0
CHECK_TIMEOUT_S = 0.25
FAILURE_LOG_EVERY_S = 10.0
MAX_WAIT_S = 5.0  # one wait; the step then asks again (its cancel is seen meanwhile anyway)

_TENANT_RATE = prepare(text("SELECT llm_rate FROM tenants WHERE id = :tenant_id"))
_SET_TENANT_RATE = prepare(
    text("UPDATE tenants SET llm_rate = :rate WHERE slug = :slug RETURNING id, slug, llm_rate")
)


class NamedLimits:
    """The `outlive.workflows.calls.Limits` a worker gives its attempts."""

    def __init__(self, redis: Redis, sessions: Sessions, settings: Settings) -> None:
        self._script: Any = redis.register_script(TAKE_SCRIPT)
        self._sessions = sessions
        self._global = settings.limit_llm
        self._share = settings.limit_tenant_share
        self._tenant_rates: dict[TenantId, tuple[float, Rate | None]] = {}
        self._last_failure_log = -FAILURE_LOG_EVERY_S

    async def acquire(self, tenant_id: TenantId, name: str, *, tokens: int = 0) -> None:
        if name not in KNOWN:
            raise ValueError(f"unknown limit {name!r}; known: {', '.join(KNOWN)}")
        buckets = await self._buckets(tenant_id, name)
        while buckets:
            wait_ms = await self._take(buckets)
            if wait_ms <= 0:
                return
            await asyncio.sleep(min(wait_ms / 1000, MAX_WAIT_S))

    async def _buckets(self, tenant_id: TenantId, name: str) -> list[tuple[str, Rate]]:
        found: list[tuple[str, Rate]] = []
        if self._global is not None:
            found.append((f"{PREFIX}{name}:global", self._global))
        own = await self._tenant_rate(tenant_id)
        if own is None and self._global is not None:
            count = max(1, int(self._global.count * self._share))
            own = Rate(count, self._global.per_s)
        if own is not None:
            found.append((f"{PREFIX}{name}:tenant:{tenant_id}", own))
        return found

    async def _tenant_rate(self, tenant_id: TenantId) -> Rate | None:
        now = time.monotonic()
        cached = self._tenant_rates.get(tenant_id)
        if cached is not None and cached[0] > now:
            return cached[1]
        async with self._sessions.unit(tenant_id, single_statement=True) as uow:
            row = await uow.one(_TENANT_RATE, tenant_id=tenant_id)
        raw = None if row is None else row["llm_rate"]
        parsed = Rate.parse(raw) if raw else None
        rate = parsed if isinstance(parsed, Rate) else None
        self._tenant_rates[tenant_id] = (now + TENANT_RATE_TTL_S, rate)
        return rate

    async def _take(self, buckets: list[tuple[str, Rate]]) -> int:
        """0 when a token was taken from every bucket; else the milliseconds to wait."""
        args: list[float] = []
        for _, rate in buckets:
            args += [1, rate.count / (rate.per_s * 1000)]  # capacity 1: spread evenly
        try:
            async with asyncio.timeout(CHECK_TIMEOUT_S):
                taken, wait_ms = await self._script(keys=[k for k, _ in buckets], args=args)
        except (RedisError, OSError, TimeoutError) as exc:
            self._log_failure(exc)
            return 0
        return 0 if taken else max(1, int(wait_ms))

    def _log_failure(self, exc: BaseException) -> None:
        now = time.monotonic()
        if now - self._last_failure_log >= FAILURE_LOG_EVERY_S:
            self._last_failure_log = now
            log.warning("named limits not enforced, Redis failed (%r): letting calls through", exc)


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
