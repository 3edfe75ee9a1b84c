"""`agentStats(hours)`: per agent, the tenant's runs created in the window, counted by outcome,
with the median duration of the succeeded ones; another tenant's runs never count."""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.tx import Sessions
from tests.support import Api, TenantHandle

QUERY = (
    "query($h: Int) { agentStats(hours: $h) "
    "{ agent hours runs succeeded failed cancelled p50DurationMs } }"
)

# Settles a run by hand with a chosen duration and age (the agents are not what is under test).
SETTLE = text(
    """UPDATE runs SET status = :status,
           created_at = now() - make_interval(hours => :age_h),
           started_at = now() - make_interval(hours => :age_h),
           finished_at = now() - make_interval(hours => :age_h)
                         + make_interval(secs => :duration_ms / 1000.0)
       WHERE id = CAST(:id AS uuid)"""
)


async def _run(
    api: Api, sessions: Sessions, tenant: TenantHandle, status: str, ms: int, age_h: int = 0
) -> None:
    started = await api.start_run(tenant.token, "demo")
    async with sessions.unit() as uow:
        await uow.execute(
            SETTLE, status=status, age_h=age_h, duration_ms=ms, id=started["run"]["id"]
        )


async def test_counts_outcomes_and_the_median_duration_per_agent(
    api: Api, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    for ms in (100, 300, 900):
        await _run(api, sessions, tenant, "SUCCEEDED", ms)
    await _run(api, sessions, tenant, "FAILED", 5000)
    await _run(api, sessions, tenant, "CANCELLED", 7000)
    await _run(api, sessions, tenant, "SUCCEEDED", 60_000, age_h=48)  # outside 24 h
    await _run(api, sessions, other_tenant, "SUCCEEDED", 1)

    day = await api.gql(QUERY, {"h": 24}, token=tenant.token)
    assert day["agentStats"] == [
        {
            "agent": "demo",
            "hours": 24,
            "runs": 5,
            "succeeded": 3,
            "failed": 1,
            "cancelled": 1,
            "p50DurationMs": 300.0,
        }
    ]
    week = (await api.gql(QUERY, {"h": 168}, token=tenant.token))["agentStats"]
    assert [(a["runs"], a["succeeded"], a["p50DurationMs"]) for a in week] == [(6, 4, 600.0)]
    theirs = (await api.gql(QUERY, {"h": 24}, token=other_tenant.token))["agentStats"]
    assert [(a["runs"], a["p50DurationMs"]) for a in theirs] == [(1, 1.0)]


async def test_a_window_out_of_bounds_is_refused(api: Api, tenant: TenantHandle) -> None:
    for hours in (0, 745):
        response = await api.post(QUERY, {"h": hours}, token=tenant.token)
        assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"
