"""Every read and write is scoped to the token's tenant; another tenant's id reads as null."""

from __future__ import annotations

from tests.support import Api, TenantHandle


async def test_a_tenant_sees_and_touches_only_its_own_runs(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    mine = (await api.start_run(tenant.token, "demo"))["run"]
    theirs = (await api.start_run(other_tenant.token, "demo"))["run"]

    assert await api.run(other_tenant.token, mine["id"]) is None
    assert (await api.run(tenant.token, mine["id"]) or {})["id"] == mine["id"]

    listed = await api.gql("{ runs { edges { node { id } } } }", token=other_tenant.token)
    assert [e["node"]["id"] for e in listed["runs"]["edges"]] == [theirs["id"]]
    filtered = await api.gql(
        '{ runs(agent: "demo", status: [QUEUED]) { edges { node { id } } } }', token=tenant.token
    )
    assert [e["node"]["id"] for e in filtered["runs"]["edges"]] == [mine["id"]]

    response = await api.post(
        "mutation($id: ID!) { cancelRun(id: $id) { id } }",
        {"id": mine["id"]},
        token=other_tenant.token,
    )
    assert response.json()["errors"][0]["extensions"]["code"] == "NOT_FOUND"
    assert (await api.run(tenant.token, mine["id"]) or {})["status"] == "QUEUED"

    viewer = await api.gql(
        "{ viewer { tenant { id slug } user { email } } }", token=other_tenant.token
    )
    assert viewer["viewer"]["tenant"]["id"] == str(other_tenant.id)
    assert viewer["viewer"]["user"]["email"] == other_tenant.principal.user.email


async def test_runs_pagination_is_newest_first_and_complete(api: Api, tenant: TenantHandle) -> None:
    ids = []
    for agent in ("demo", "llm"):
        started = await api.start_run(
            tenant.token, agent, {"prompt": "p"} if agent == "llm" else None
        )
        ids.append(started["run"]["id"])
        await api.cancel(tenant.token, started["run"]["id"])
    for _ in range(3):
        started = await api.start_run(tenant.token, "demo")
        ids.append(started["run"]["id"])
        await api.cancel(tenant.token, started["run"]["id"])
    seen: list[str] = []
    after = None
    while True:
        page = await api.gql(
            "query($a: String) { runs(first: 2, after: $a) { edges { cursor node { id } } "
            "pageInfo { hasNextPage endCursor } } }",
            {"a": after},
            token=tenant.token,
        )
        seen += [e["node"]["id"] for e in page["runs"]["edges"]]
        info = page["runs"]["pageInfo"]
        if not info["hasNextPage"]:
            break
        after = info["endCursor"]
    assert seen == list(reversed(ids))


async def test_agents_lists_the_built_in_agents_with_their_schemas(
    api: Api, tenant: TenantHandle
) -> None:
    data = await api.gql("{ agents { name description inputSchema } }", token=tenant.token)
    agents = {a["name"]: a for a in data["agents"]}
    assert set(agents) >= {"demo", "llm"}
    demo = agents["demo"]["inputSchema"]["properties"]
    assert demo["turns"]["maximum"] == 1000
    assert demo["delayMs"]["maximum"] == 600000
    assert agents["llm"]["inputSchema"]["required"] == ["prompt"]
