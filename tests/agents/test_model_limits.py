"""A named limit shared across workers (`ctx.step(limit="llm")`): 4 worker processes' worth of
`WorkerHost`s (each its own runtime, Redis and PostgreSQL connections) and 3 tenants calling the
stub model, at a scaled-down rate (12 calls per 6 s) so the test runs in seconds; the full-size
one (60 per minute) is `bench/model_limits.py`."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest
from redis.asyncio import Redis

from outlive.config import Rate, Settings
from outlive.db.tx import Sessions
from outlive.services.limits import PREFIX as LIMITS_PREFIX
from outlive.services.limits import set_llm_rate, set_llm_token_rate
from outlive.worker import WorkerHost
from tests.agents.stub_model import StubModel, serve, usage_of
from tests.conftest import make_settings, new_tenant
from tests.support import Api, NudgeWatch, Servers, settled

pytestmark = pytest.mark.timeout(90)

WINDOW_S = 6.0
GLOBAL = Rate(12, WINDOW_S)  # 2 calls a second, spread evenly
LIMITED = Rate(3, WINDOW_S)  # one tenant's own rate


def most_in_any_window(arrivals: list[float], window: float) -> int:
    ordered = sorted(arrivals)
    most, start = 0, 0
    for end, at in enumerate(ordered):
        while at - ordered[start] >= window:
            start += 1
        most = max(most, end - start + 1)
    return most


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubModel, str]]:
    model = StubModel(turns=8)
    async with serve(model) as url:
        yield model, url


@pytest.fixture
def settings(servers: Servers, stub: tuple[StubModel, str]) -> Settings:
    return make_settings(servers, llm_base_url=stub[1], llm_model="tiny", limit_llm=GLOBAL)


async def test_a_limit_holds_across_workers_and_a_tenant_limit_leaves_others_their_share(
    api: Api, settings: Settings, sessions: Sessions, stub: tuple[StubModel, str]
) -> None:
    model, _ = stub
    tenants = [await new_tenant(sessions, name) for name in ("slow", "b", "c")]
    async with sessions.unit() as uow:
        await set_llm_rate(uow, tenant_slug=tenants[0].principal.tenant.slug, rate=LIMITED)
    async with AsyncExitStack() as stack:
        for _ in range(4):
            host = WorkerHost(settings, concurrency=2)
            await host.start()
            stack.push_async_callback(host.stop)
        turns = {tenants[0].id: 4, tenants[1].id: 8, tenants[2].id: 8}
        started = {}
        for tenant in tenants:
            run = await api.start_run(
                tenant.token, "llm", {"prompt": str(tenant.id), "maxTurns": turns[tenant.id]}
            )
            started[tenant.id] = run["run"]["id"]
        assert settings.redis_url is not None
        for tenant in tenants:
            async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
                run = await watch.until(started[tenant.id], settled, timeout=60)
            assert run.status == "SUCCEEDED", run.error
    assert len(model.requests) == 20
    assert most_in_any_window(model.arrivals, WINDOW_S) <= GLOBAL.count + 1
    by_tenant: dict[str, list[float]] = {}
    for request, at in zip(model.requests, model.arrivals, strict=True):
        by_tenant.setdefault(request["messages"][0]["content"], []).append(at)
    slow = by_tenant[str(tenants[0].id)]
    assert most_in_any_window(slow, WINDOW_S) <= LIMITED.count + 1
    for tenant in tenants[1:]:  # the others were not held to the slow tenant's rate
        mine = by_tenant[str(tenant.id)]
        assert most_in_any_window(mine, WINDOW_S) > LIMITED.count + 1
        # ... nor did either take the whole global limit (the default share is a half)
        assert most_in_any_window(mine, WINDOW_S) <= GLOBAL.count // 2 + 1


TOKENS = Rate(100, 6.0)  # a tenant's share: 50 tokens per 6 s; the stub's reply #1 uses 111


async def test_a_token_limit_spent_by_a_reply_parks_the_run_until_it_refills(
    api: Api, servers: Servers, sessions: Sessions, stub: tuple[StubModel, str]
) -> None:
    """Tokens are spent after the call, so the first reply goes through and puts the tenant 61
    tokens below zero; the next call would wait about 7.4 s, longer than the 2 s the step may
    wait in-process, so the run parks WAITING (no worker held) and its timer resumes it."""
    model, url = stub
    settings = make_settings(
        servers, llm_base_url=url, llm_model="tiny", limit_llm_tokens=TOKENS, limit_park_s=2
    )
    tenant = await new_tenant(sessions, "tokens")
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        started = await api.start_run(tenant.token, "llm", {"prompt": "p", "maxTurns": 2})
        run_id = started["run"]["id"]
        assert settings.redis_url is not None
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            parked = await watch.until(run_id, lambda r: r.status == "WAITING", timeout=30)
            assert len(model.requests) == 1
            assert parked.wake_at is not None
            assert parked.waiting_for is None
            run = await watch.until(run_id, settled, timeout=60)
    finally:
        await host.stop()
    assert run.status == "SUCCEEDED", run.error
    assert len(model.requests) == 2
    assert model.arrivals[1] - model.arrivals[0] >= 7.0  # 62 tokens at 50 per 6 s
    assert run.resumes == 1


async def test_a_wait_for_a_token_within_the_park_limit_is_made_in_process(
    api: Api, servers: Servers, sessions: Sessions, stub: tuple[StubModel, str]
) -> None:
    """The same spend with a park limit of 30 s: the run never parks, and still waits."""
    model, url = stub
    settings = make_settings(servers, llm_base_url=url, llm_model="tiny", limit_llm_tokens=TOKENS)
    tenant = await new_tenant(sessions, "tokens")
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        started = await api.start_run(tenant.token, "llm", {"prompt": "p", "maxTurns": 2})
        assert settings.redis_url is not None
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            run = await watch.until(started["run"]["id"], settled, timeout=60)
    finally:
        await host.stop()
    assert run.status == "SUCCEEDED", run.error
    assert run.resumes == 0  # never parked
    assert model.arrivals[1] - model.arrivals[0] >= 7.0


async def test_a_tenant_s_own_token_rate_is_the_one_it_is_held_to(
    api: Api, servers: Servers, sessions: Sessions, stub: tuple[StubModel, str]
) -> None:
    """A deployment token limit whose share would never hold this run back (5,000 per 6 s),
    and the tenant's own token rate (`tenant set-limits --llm-token-rate`, 50 per 6 s): the
    first reply's 111 tokens put it below zero, and the run parks as under a small share."""
    model, url = stub
    settings = make_settings(
        servers,
        llm_base_url=url,
        llm_model="tiny",
        limit_llm_tokens=Rate(10_000, 6.0),
        limit_park_s=2,
    )
    tenant = await new_tenant(sessions, "own-tokens")
    async with sessions.unit() as uow:
        slug = tenant.principal.tenant.slug
        await set_llm_token_rate(uow, tenant_slug=slug, rate=Rate(50, 6.0))
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        started = await api.start_run(tenant.token, "llm", {"prompt": "p", "maxTurns": 2})
        assert settings.redis_url is not None
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            await watch.until(started["run"]["id"], lambda r: r.status == "WAITING", timeout=30)
            assert len(model.requests) == 1
            run = await watch.until(started["run"]["id"], settled, timeout=60)
    finally:
        await host.stop()
    assert run.status == "SUCCEEDED", run.error
    assert model.arrivals[1] - model.arrivals[0] >= 7.0


BIG = Rate(100_000, 60.0)  # the deployment's tokens a minute; a tenant's share is half


async def test_one_tenant_s_huge_calls_never_hold_another_tenant_s_call(
    api: Api, servers: Servers, sessions: Sessions
) -> None:
    """Issue 39, M1: tenant A's call reports 1,000,000 tokens (it reserved a few thousand).
    The excess is A's alone: B's next call starts at once, and the deployment's bucket is not
    below zero; A's own next call waits for its deficit (parked, far off)."""
    model = StubModel(turns=1)
    model.usage = lambda body, k: (
        {"prompt_tokens": 900_000, "completion_tokens": 100_000, "total_tokens": 1_000_000}
        if "BIG" in json.dumps(body["messages"])
        else usage_of(k)
    )
    async with serve(model) as url:
        settings = make_settings(
            servers, llm_base_url=url, llm_model="tiny", limit_llm_tokens=BIG, limit_park_s=2
        )
        a, b = await new_tenant(sessions, "big"), await new_tenant(sessions, "small")
        host = WorkerHost(settings, concurrency=4)
        await host.start()
        try:
            assert settings.redis_url is not None
            async with NudgeWatch(settings.redis_url, sessions, a.id) as watch_a:
                first = await api.start_run(
                    a.token, "llm", {"prompt": "BIG hello", "stream": False}
                )
                assert (await watch_a.until(first["run"]["id"], settled)).status == "SUCCEEDED"
                again = await api.start_run(a.token, "llm", {"prompt": "BIG again"})
                held = await watch_a.until(again["run"]["id"], lambda r: r.status == "WAITING")
            async with NudgeWatch(settings.redis_url, sessions, b.id) as watch_b:
                theirs = await api.start_run(b.token, "llm", {"prompt": "hello", "stream": False})
                done = await watch_b.until(theirs["run"]["id"], settled, timeout=20)
            redis = Redis.from_url(settings.redis_url)
            level = await redis.hget(f"{LIMITS_PREFIX}{{llm}}:tokens:global", "tokens")
            await redis.aclose()
        finally:
            await host.stop()
    assert done.status == "SUCCEEDED", done.error
    assert done.resumes == 0  # B never parked: its call was made at once
    assert held.wake_at is not None
    assert held.waiting_for is None
    assert (held.wake_at - held.updated_at).total_seconds() > 60  # ~18 min of A's own share
    assert float(level or 0) >= 0  # the deployment's bucket never went below zero
    assert len(model.requests) == 2  # A's first and B's: A's second was not made
