"""`ctx.schedules.create`: an agent sets its own reminder, once, whatever its attempts."""

from __future__ import annotations

from outlive.db.tx import Sessions
from outlive.services import schedules
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.schedules.support import ONE, rows
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled


async def test_a_run_s_schedule_is_made_once_across_its_attempts(
    servers: Servers, tenant: TenantHandle, sessions: Sessions
) -> None:
    settings = make_settings(servers, agent_modules=["tests.schedules.agents:AGENT"])
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        async with (
            Api.running(settings) as api,
            NudgeWatch(settings.redis_url, sessions, tenant.id) as watch,  # type: ignore[arg-type]
        ):
            started = await api.start_run(tenant.token, "reminder", {})
            run = await watch.until(started["run"]["id"], settled, timeout=60)
            assert run.status == "SUCCEEDED", run.error
            assert run.attempt == 2  # the second attempt replayed the step
            made = (await api.gql(ONE, {"id": run.output["schedule"]}, token=tenant.token))[
                "schedule"
            ]
    finally:
        await host.stop()
    assert (made["agent"], made["cron"], made["timezone"]) == (
        "demo",
        "0 8 * * 1-5",
        "Europe/Paris",
    )
    found = await rows(
        sessions, "SELECT id, origin FROM schedules WHERE tenant_id = :t", t=tenant.id
    )
    assert len(found) == 1
    assert found[0]["origin"] == f"{run.id}/daily#1"
    # a create whose step was never recorded (the worker died after its commit) finds it again
    spec = schedules.ScheduleSpec(agent="demo", cron="@daily")
    async with sessions.unit(tenant.id) as uow:
        again = await schedules.create_schedule(
            uow, spec, limits=schedules.ScheduleLimits(), origin=found[0]["origin"]
        )
    assert again.id == found[0]["id"]
