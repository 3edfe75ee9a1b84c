"""Model-call tokens are reserved before the call and settled after it (issue 39, M1), on the
real Redis: concurrent calls cannot all start on one token, what a call did not use goes back,
and what it used beyond its reservation is charged to its tenant's bucket alone, never to the
deployment's, which never goes below zero."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from redis.asyncio import Redis

from outlive.config import Rate, Settings
from outlive.db.tx import Sessions
from outlive.errors import LimitWait
from outlive.ids import TenantId
from outlive.services.limits import PREFIX, NamedLimits
from tests.conftest import make_settings
from tests.support import Servers

TOKENS = Rate(1000, 60)  # a tenant's share: 500


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(
        servers, limit_llm_tokens=TOKENS, limit_park_s=1.5
    )  # a wait past 1.5 s: LimitWait


async def level(redis: Redis, key: str) -> float:
    raw = await redis.hget(f"{PREFIX}{{llm}}:tokens:{key}", "tokens")
    return float(raw) if raw is not None else float("nan")


async def test_concurrent_calls_start_only_as_far_as_their_reservations_fit(
    settings: Settings, sessions: Sessions
) -> None:
    redis = Redis.from_url(settings.redis_url or "")
    limits = NamedLimits(redis, sessions, settings)
    tenant = TenantId(uuid.uuid4())
    outcomes = await asyncio.gather(
        *(limits.acquire(tenant, "llm", tokens=300) for _ in range(10)), return_exceptions=True
    )
    await redis.aclose()
    started = [o for o in outcomes if not isinstance(o, BaseException)]
    assert len(started) == 1  # 300 of the tenant's 500; the others would wait (LimitWait here)
    assert all(isinstance(o, LimitWait) for o in outcomes if o not in started)


async def test_settling_gives_back_the_unused_and_charges_the_excess_to_the_tenant_alone(
    settings: Settings, sessions: Sessions
) -> None:
    redis = Redis.from_url(settings.redis_url or "")
    limits = NamedLimits(redis, sessions, settings)
    a, b = TenantId(uuid.uuid4()), TenantId(uuid.uuid4())

    small = await limits.acquire(a, "llm", tokens=300)
    await limits.settle(small, 100)  # 200 back to both
    after_small = (await level(redis, "global"), await level(redis, f"tenant:{a}"))

    huge = await limits.acquire(a, "llm", tokens=300)  # it reports far more than it reserved
    await limits.settle(huge, 1_000_000)
    after_huge = (await level(redis, "global"), await level(redis, f"tenant:{a}"))

    theirs = await limits.acquire(b, "llm", tokens=300)  # B is not held by A's deficit
    await redis.aclose()

    assert after_small[0] == pytest.approx(900, abs=2)
    assert after_small[1] == pytest.approx(400, abs=2)
    assert [t for _, _, t in huge.tokens] == [300, 300]
    assert after_huge[0] == pytest.approx(600, abs=3)  # A's reservation only: never below zero
    assert after_huge[1] < -999_000  # the excess is A's own
    assert [t for _, _, t in theirs.tokens] == [300, 300]


async def test_a_reservation_is_never_more_than_the_tenant_s_share_of_the_deployment(
    settings: Settings, sessions: Sessions
) -> None:
    redis = Redis.from_url(settings.redis_url or "")
    limits = NamedLimits(redis, sessions, settings)
    reservation = await limits.acquire(TenantId(uuid.uuid4()), "llm", tokens=50_000)
    await redis.aclose()
    assert [t for _, _, t in reservation.tokens] == [500, 500]  # half of 1000, not all of it
