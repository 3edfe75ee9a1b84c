"""A named limit shared across workers (`ctx.step(limit="llm")`): 4 worker processes' worth of
`WorkerHost`s (each its own runtime, Redis and PostgreSQL connections) and 3 tenants calling the
stub model, at a scaled-down rate (12 calls per 6 s) so the test runs in seconds; the full-size
one (60 per minute) is `bench/model_limits.py`."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack

import pytest

from outlive.config import Rate, Settings
from outlive.db.tx import Sessions
from outlive.services.limits import set_llm_rate
from outlive.worker import WorkerHost
from tests.agents.stub_model import StubModel, serve
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
