"""Children are runs their tenant starts (issue 39, L5): each takes a token of the tenant's
startRun bucket, as `startRun` does, so one start of a parent cannot make a thousand runs past
the tenant's rate; past it, the parent waits for the bucket rather than fail."""

from __future__ import annotations

from typing import Any

import pytest

from outlive.db.tx import Sessions
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"


async def _start(api: Api, tenant: TenantHandle, key: str, **input: Any) -> dict[str, Any]:
    body = (
        await api.post(
            START, {"i": {"agent": "demo", "key": key, "input": input}}, token=tenant.token
        )
    ).json()
    return body


async def test_children_take_their_tenant_s_start_run_tokens(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, rate_start_run="5/60")  # a token every 12 s
    async with (
        Api.running(settings) as api,
        NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        host = WorkerHost(settings, concurrency=4)
        await host.start()
        try:
            parent = await _start(api, tenant, "p", turns=1, delayMs=0, children=3)  # 1 + 3
            parent_id = parent["data"]["startRun"]["run"]["id"]
            await watch.until(parent_id, settled, timeout=60)
        finally:
            await host.stop()
        fifth = await _start(api, tenant, "a", turns=1, delayMs=600_000)
        sixth = await _start(api, tenant, "b", turns=1, delayMs=600_000)

    assert "errors" not in fifth
    assert sixth["errors"][0]["extensions"]["code"] == "RATE_LIMITED"


@pytest.mark.timeout(120)
async def test_a_parent_past_the_bucket_waits_for_it_and_every_child_runs(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, rate_start_run="3/1")  # 3 at once, 3 a second
    async with (
        Api.running(settings) as api,
        NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        host = WorkerHost(settings, concurrency=8)
        await host.start()
        try:
            started = await _start(api, tenant, "p", turns=1, delayMs=0, children=7, maxParallel=7)
            parent_id = started["data"]["startRun"]["run"]["id"]
            done = await watch.until(parent_id, settled, timeout=60)
        finally:
            await host.stop()

    assert done.status.value == "SUCCEEDED"
    assert len((done.output or {})["childOutputs"]) == 7
