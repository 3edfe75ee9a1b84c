"""The reads the web console added: `agentStats(hours)` (per agent, the tenant's runs created in
the window, counted by outcome, with the median duration of the succeeded ones; another tenant's
runs never count) and the runs list's created-time range."""

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


async def test_runs_filtered_by_a_created_time_range(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    """`runs(createdSince, createdBefore)`: [since, before), newest first, with the other filters
    and cursor paging; an empty or reversed range is refused."""
    for age_h in (1, 5, 30):
        await _run(api, sessions, tenant, "FAILED", 10, age_h=age_h)
    query = (
        "query($s: DateTime, $b: DateTime, $a: String) { runs(first: 1, after: $a,"
        " createdSince: $s, createdBefore: $b, status: [FAILED]) { edges { node { createdAt } }"
        " pageInfo { hasNextPage endCursor } } }"
    )
    async with sessions.unit() as uow:
        row = await uow.one(text("SELECT now() - interval '10 hours' AS s, now() AS b"))
    assert row is not None
    since, before = row["s"].isoformat(), row["b"].isoformat()
    first = (await api.gql(query, {"s": since, "b": before}, token=tenant.token))["runs"]
    assert len(first["edges"]) == 1
    assert first["pageInfo"]["hasNextPage"] is True
    second = await api.gql(
        query, {"s": since, "b": before, "a": first["pageInfo"]["endCursor"]}, token=tenant.token
    )
    assert len(second["runs"]["edges"]) == 1
    assert second["runs"]["pageInfo"]["hasNextPage"] is False  # the 30 h old one is out
    response = await api.post(query, {"s": before, "b": since}, token=tenant.token)
    assert response.json()["errors"][0]["extensions"]["code"] == "BAD_USER_INPUT"


async def test_runs_in_either_order_with_cursor_paging(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    """`runs(order:)`: newest first by default, oldest first when asked; a cursor pages on in
    the order it was read in, so two pages of two meet without a gap or a repeat."""
    for age_h in (3, 2, 1, 0):
        await _run(api, sessions, tenant, "SUCCEEDED", 10, age_h=age_h)
    query = (
        "query($o: RunOrder!, $a: String) { runs(first: 2, after: $a, order: $o)"
        " { edges { node { id createdAt } } pageInfo { hasNextPage endCursor } } }"
    )
    default_query = "query { runs(first: 2) { edges { node { createdAt } } } }"
    default = (await api.gql(default_query, token=tenant.token))["runs"]
    pages: dict[str, list[str]] = {}
    for order in ("NEWEST_FIRST", "OLDEST_FIRST"):
        first = (await api.gql(query, {"o": order}, token=tenant.token))["runs"]
        assert first["pageInfo"]["hasNextPage"] is True
        after = {"o": order, "a": first["pageInfo"]["endCursor"]}
        second = (await api.gql(query, after, token=tenant.token))["runs"]
        assert second["pageInfo"]["hasNextPage"] is False
        pages[order] = [e["node"]["createdAt"] for e in first["edges"] + second["edges"]]
    newest = pages["NEWEST_FIRST"]
    assert newest == sorted(newest, reverse=True)
    assert len(set(newest)) == 4
    assert pages["OLDEST_FIRST"] == newest[::-1]
    assert [e["node"]["createdAt"] for e in default["edges"]] == newest[:2]
    response = await api.post(query, {"o": "SIDEWAYS"}, token=tenant.token)
    assert response.json()["errors"], response.text  # not an order: refused, nothing read
