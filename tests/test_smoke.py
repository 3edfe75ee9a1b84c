from __future__ import annotations

from tests.support import Api, NudgeWatch, TenantHandle, settled


async def test_a_demo_run_goes_from_queued_to_succeeded(api: Api, tenant: TenantHandle, worker, sessions, settings) -> None:
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "demo", {"turns": 2, "delayMs": 10})
        assert started["created"] is True
        run = await watch.until(started["run"]["id"], settled)
    assert run.status == "SUCCEEDED", run.error
    assert run.output == {"turns": 2}
    body = await api.run(tenant.token, started["run"]["id"], events=True)
    assert [e["type"] for e in body["events"]] == ["claimed", "turn", "turn", "succeeded"]
