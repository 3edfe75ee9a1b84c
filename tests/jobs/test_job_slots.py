"""One tenant cannot hold every job slot of a worker (security review round 4, L6).

Before: a worker ran 16 jobs at once while a tenant could have 20 in flight, so a tenant with
slow (but answering) endpoints filled every slot and another tenant's delivery waited for one of
its attempts to end (up to `OUTLIVE_WEBHOOK_TIMEOUT_S`). Now a worker runs at least twice the
per-tenant cap at once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.db.tx import Sessions
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.jobs.test_webhooks import CREATE, _settle_a_run, _wait_delivery
from tests.support import Api, NudgeWatch, Servers, TenantHandle, loopback_server

pytestmark = pytest.mark.timeout(120)


class SlowEndpoint:
    """Answers 200 once `release` is set; `holding` is set when `expected` requests wait."""

    def __init__(self, expected: int) -> None:
        self.expected = expected
        self.waiting = 0
        self.holding = asyncio.Event()
        self.release = asyncio.Event()

    async def hook(self, request: Request) -> Response:
        await request.body()
        self.waiting += 1
        if self.waiting >= self.expected:
            self.holding.set()
        await self.release.wait()
        return Response(status_code=200)


@pytest.fixture
async def slow() -> AsyncIterator[tuple[SlowEndpoint, str]]:
    endpoint = SlowEndpoint(expected=4)
    app = Starlette(routes=[Route("/hook", endpoint.hook, methods=["POST"])])
    async with loopback_server(app) as url:
        yield endpoint, f"{url}/hook"
        endpoint.release.set()


def test_a_worker_runs_at_least_twice_a_tenants_jobs_cap(servers: Servers) -> None:
    host = WorkerHost(make_settings(servers, tenant_max_inflight_jobs=20))
    assert host.jobs_concurrency >= 40


async def test_a_tenant_with_slow_endpoints_leaves_job_slots_for_another(
    api: Api,
    jobs_world: Any,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    slow: tuple[SlowEndpoint, str],
) -> None:
    endpoint, url = slow
    for _ in range(4):  # tenant A: 4 deliveries per settled run, each held by its endpoint
        await api.gql(CREATE, {"url": url, "events": ["run.cancelled"]}, token=tenant.token)
    async with loopback_server(Starlette(routes=[Route("/hook", _ok, methods=["POST"])])) as fast:
        await api.gql(
            CREATE, {"url": f"{fast}/hook", "events": ["run.cancelled"]}, token=other_tenant.token
        )
        # The fixture's worker asks for 4 job slots: A's cap of 4 would have filled all of them.
        async with jobs_world(tenant_max_inflight_jobs=4, webhook_timeout_s=60) as world:
            assert world.settings.redis_url is not None
            async with NudgeWatch(world.settings.redis_url, sessions, tenant.id) as watch_a:
                await _settle_a_run(api, watch_a, tenant.token)
                async with asyncio.timeout(30):
                    await endpoint.holding.wait()  # A's 4 deliveries hold 4 slots now
            async with NudgeWatch(world.settings.redis_url, sessions, other_tenant.id) as watch:
                await _settle_a_run(api, watch, other_tenant.token)
                async with asyncio.timeout(20):  # before: until A's attempts ended (60 s)
                    delivered = await _wait_delivery(api, watch, other_tenant.token, "DELIVERED")
            assert delivered["attempts"] == 1
            endpoint.release.set()


async def _ok(_: Request) -> Response:
    return Response(status_code=200)
