"""`runs { totalCount }`: how many runs match the list's filters on every page, tenant-scoped,
counted up to 1,001 (1,001: more than 1,000), with the filters the page uses."""

from __future__ import annotations

from sqlalchemy import text

from outlive.db.tx import Sessions
from tests.support import Api, TenantHandle

TOTAL = """query($status: [RunStatus!], $agent: String, $tags: [String!], $first: Int,
  $after: String) {
  runs(status: $status, agent: $agent, tags: $tags, first: $first, after: $after) {
    totalCount edges { cursor } } }"""

# Settled runs written by hand (the agents are not what is under test).
INSERT = text(
    "INSERT INTO runs (tenant_id, agent, input, status, tags)"
    " SELECT :t, :agent, '{}'::jsonb, :status, CAST(:tags AS varchar[])"
    " FROM generate_series(1, :n) g"
)


async def _insert(
    sessions: Sessions, tenant: TenantHandle, n: int, status: str, agent: str, tags: list[str]
) -> None:
    async with sessions.unit() as uow:
        await uow.session.execute(
            INSERT, {"t": tenant.id, "agent": agent, "status": status, "tags": tags, "n": n}
        )


async def test_the_total_follows_the_filters_is_bounded_and_is_the_tenants_own(
    api: Api, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    await _insert(sessions, tenant, 1005, "FAILED", "demo", [])
    await _insert(sessions, tenant, 2, "SUCCEEDED", "demo", ["blue"])
    await _insert(sessions, tenant, 1, "SUCCEEDED", "other", [])
    await _insert(sessions, other_tenant, 4, "SUCCEEDED", "demo", ["blue"])

    async def total(token: str = tenant.token, **variables: object) -> int | None:
        data = await api.gql(TOTAL, dict(variables), token=token)
        count: int | None = data["runs"]["totalCount"]
        return count

    assert await total(status=["FAILED"]) == 1001  # more than 1,000: counted no further
    assert await total() == 1001
    assert await total(status=["SUCCEEDED"]) == 3
    assert await total(status=["SUCCEEDED"], agent="demo") == 2
    assert await total(tags=["blue"]) == 2
    assert await total(agent="nobody") == 0
    first = await api.gql(TOTAL, {"status": ["SUCCEEDED"], "first": 1}, token=tenant.token)
    assert len(first["runs"]["edges"]) == 1
    after = first["runs"]["edges"][0]["cursor"]
    assert await total(status=["SUCCEEDED"], first=1, after=after) == 3  # every page, not the rest
    assert await total(other_tenant.token, status=["FAILED"]) == 0
    assert await total(other_tenant.token, tags=["blue"]) == 4
