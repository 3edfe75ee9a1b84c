"""Child runs (contract §4.1, §5, §7 "Children"): `ctx.call` / `ctx.spawn` / `ctx.map` through
the `demo` agent's `children` and a test agent, driven through the API and a worker.

Each test fails without child runs: there was no `children` input, no `Run.children`, and a
second live run of one agent could not exist (one active run per tenant and agent)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any
from uuid import UUID

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.services import runs as runs_service
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

pytestmark = pytest.mark.timeout(120)
FAMILY = "tests.children_agents:AGENTS"
TREE = """query($id: ID!) { run(id: $id) { id status parentId rootId output waitingFor
  children(first: 100) { edges { cursor node { id status parentId rootId output } }
                         pageInfo { hasNextPage endCursor } } } }"""


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers, agent_modules=[FAMILY], run_retry_delay_s=0.2)


@pytest.fixture
async def watch(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> AsyncIterator[NudgeWatch]:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as listening:
        yield listening


async def start(api: Api, tenant: TenantHandle, agent: str, key: str, **input: Any) -> str:
    started = await api.gql(
        "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } created } }",
        {"i": {"agent": agent, "input": input, "key": key}},
        token=tenant.token,
    )
    assert started["startRun"]["created"] is True
    return str(started["startRun"]["run"]["id"])


async def tree(api: Api, tenant: TenantHandle, run_id: str) -> dict[str, Any]:
    data = await api.gql(TREE, {"id": run_id}, token=tenant.token)
    run: dict[str, Any] = data["run"]
    return run


async def events(sessions: Sessions, run_id: str) -> list[runs_service.EventRecord]:
    return await runs_service.list_events(sessions, RunId(UUID(run_id)), first=1000)


@pytest.mark.usefixtures("worker")
async def test_map_returns_the_childrens_outputs_in_input_order_and_the_tree_reads_back(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(
        api, tenant, "demo", "fan", turns=1, delayMs=0, children=5, childTurns=2, maxParallel=2
    )
    done = await watch.until(parent, settled, timeout=60)
    assert done.status == RunStatus.SUCCEEDED, done.error
    outputs = done.output["childOutputs"]
    assert [o["childIndex"] for o in outputs] == [0, 1, 2, 3, 4]
    assert all(o["turns"] == 2 for o in outputs)
    read = await tree(api, tenant, parent)
    assert read["parentId"] is None
    assert read["rootId"] == parent
    kids = [e["node"] for e in read["children"]["edges"]]
    assert len(kids) == 5
    assert {k["parentId"] for k in kids} == {parent}
    assert {k["rootId"] for k in kids} == {parent}
    assert [k["output"]["childIndex"] for k in kids] == [0, 1, 2, 3, 4]  # oldest first
    timeline = [e.type for e in await events(sessions, parent)]
    assert timeline.count("child_started") == 5
    assert timeline.count("child_settled") == 5
    assert "waiting" in timeline  # it parked for its children at least once
    # At most two children were live at once: each child started after another settled.
    live, peak = 0, 0
    for kind in timeline:
        live += {"child_started": 1, "child_settled": -1}.get(kind, 0)
        peak = max(peak, live)
    assert peak <= 2


@pytest.mark.usefixtures("worker")
async def test_children_pages_oldest_first_and_filters_by_status(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(api, tenant, "demo", "pages", turns=1, delayMs=0, children=3)
    await watch.until(parent, settled, timeout=60)

    first = await api.gql(
        "query($id: ID!) { run(id: $id) { children(first: 2) { edges { cursor node { id } }"
        " pageInfo { hasNextPage endCursor } } } }",
        {"id": parent},
        token=tenant.token,
    )
    page = first["run"]["children"]
    assert page["pageInfo"]["hasNextPage"] is True
    rest = await api.gql(
        "query($id: ID!, $after: String) { run(id: $id) { children(first: 2, after: $after,"
        " status: [SUCCEEDED]) { edges { node { id } } pageInfo { hasNextPage } } } }",
        {"id": parent, "after": page["pageInfo"]["endCursor"]},
        token=tenant.token,
    )
    seen = [e["node"]["id"] for e in page["edges"]]
    seen += [e["node"]["id"] for e in rest["run"]["children"]["edges"]]
    assert len(set(seen)) == 3
    failed = await api.gql(
        "query($id: ID!) { run(id: $id) { children(status: [FAILED]) { edges { node { id } } } } }",
        {"id": parent},
        token=tenant.token,
    )
    assert failed["run"]["children"]["edges"] == []


async def _top_level_page(
    api: Api, tenant: TenantHandle, first: int, after: str | None = None, **filters: Any
) -> tuple[list[str], str | None]:
    data = await api.gql(
        """query($first: Int!, $after: String, $top: Boolean, $key: String) {
             runs(first: $first, after: $after, topLevel: $top, key: $key) {
               edges { node { id parentId } } pageInfo { hasNextPage endCursor } } }""",
        {"first": first, "after": after, **filters},
        token=tenant.token,
    )
    runs = data["runs"]
    more = runs["pageInfo"]["endCursor"] if runs["pageInfo"]["hasNextPage"] else None
    return [e["node"]["id"] for e in runs["edges"]], more


@pytest.mark.usefixtures("worker")
async def test_runs_top_level_leaves_the_children_out_and_pages_over_the_rest(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(api, tenant, "demo", "family", turns=1, delayMs=0, children=2)
    await watch.until(parent, settled, timeout=60)
    solo = await start(api, tenant, "demo", "solo", turns=1, delayMs=0)
    await watch.until(solo, settled, timeout=60)

    every, _ = await _top_level_page(api, tenant, 100)
    assert len(every) == 4  # the two children are listed by default
    assert every == (await _top_level_page(api, tenant, 100, top=False))[0]
    assert every == (await _top_level_page(api, tenant, 100, top=None))[0]
    assert (await _top_level_page(api, tenant, 100, top=True))[0] == [solo, parent]
    assert (await _top_level_page(api, tenant, 100, top=True, key="family"))[0] == [parent]
    assert (await _top_level_page(api, tenant, 100, key="family"))[0] == [parent]
    first, after = await _top_level_page(api, tenant, 1, top=True)
    assert first == [solo]
    assert after is not None
    assert (await _top_level_page(api, tenant, 1, after, top=True)) == ([parent], None)


@pytest.mark.usefixtures("worker")
async def test_a_failed_child_raises_child_failed_in_its_parent(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(api, tenant, "family", "fails", mode="call-failing")
    done = await watch.until(parent, settled, timeout=60)
    assert done.status == RunStatus.FAILED
    assert done.error is not None
    assert "ChildFailed" in done.error


@pytest.mark.usefixtures("worker")
async def test_return_exceptions_gives_the_failure_back_in_place(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(api, tenant, "family", "tolerant", mode="map-tolerant")
    done = await watch.until(parent, settled, timeout=60)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.output == {"outcomes": ["ok", "failed", "ok"]}


@pytest.mark.usefixtures("worker")
async def test_a_retried_parent_gets_the_same_child_back_never_a_second(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(api, tenant, "family", "retried", mode="spawn-then-flaky")
    done = await watch.until(parent, settled, timeout=60)
    assert done.status == RunStatus.SUCCEEDED, done.error
    assert done.attempt >= 2  # the flaky fault retried it after it had spawned
    rows = await sessions.all(text("SELECT id FROM runs WHERE parent_id = :p"), p=UUID(parent))
    assert len(rows) == 1
    assert done.output == {"child": str(rows[0]["id"]), "childOutput": {"turns": 1}}


async def test_a_tenant_with_a_cap_of_two_finishes_two_parents_of_three_children_each(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch, worker: Any
) -> None:
    await sessions.execute(
        text("UPDATE tenants SET max_running_runs = 2 WHERE id = :t"), t=tenant.id
    )
    parents = [await start(api, tenant, "family", f"p{i}", mode="calls-in-turn") for i in range(2)]
    for parent in parents:
        done = await watch.until(parent, settled, timeout=90)
        assert done.status == RunStatus.SUCCEEDED, done.error
        assert done.output == {"children": [{"turns": 1}] * 3}


async def test_cancelling_a_parent_cancels_its_live_descendants_and_starts_no_more(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch, worker: Any
) -> None:
    parent = await start(api, tenant, "family", "tree", mode="grandchildren")

    async def grandchildren_running() -> list[Any] | None:
        rows = await sessions.all(
            text("SELECT status FROM runs WHERE root_id = :p AND depth = 2"), p=UUID(parent)
        )
        return rows if len(rows) >= 2 and any(r["status"] == "RUNNING" for r in rows) else None

    await watch.until_true(grandchildren_running, 60, "running grandchildren")
    await api.cancel(tenant.token, parent)
    # The cancel committed before the mutation answered: any start after this is too late.
    cancelled_at = await sessions.one(text("SELECT now() AS at"))
    assert cancelled_at is not None

    async def all_settled() -> list[Any] | None:
        rows = await sessions.all(
            text("SELECT status, started_at FROM runs WHERE root_id = :p OR id = :p"),
            p=UUID(parent),
        )
        return (
            rows if all(r["status"] in ("CANCELLED", "FAILED", "SUCCEEDED") for r in rows) else None
        )

    rows = await watch.until_true(all_settled, 30, "the whole tree settled")
    assert {r["status"] for r in rows} == {"CANCELLED"}
    late = [r for r in rows if r["started_at"] is not None and r["started_at"] > cancelled_at["at"]]
    assert late == []  # no run of the tree started after the cancel committed


@pytest.mark.usefixtures("worker")
async def test_cancel_without_cascade_leaves_the_children_running_abandoned(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    parent = await start(api, tenant, "family", "leave", mode="slow-children")

    async def children_running() -> list[Any] | None:
        rows = await sessions.all(
            text("SELECT id, status FROM runs WHERE parent_id = :p"), p=UUID(parent)
        )
        return rows if rows and all(r["status"] == "RUNNING" for r in rows) else None

    await watch.until_true(children_running, 60, "the children running")
    await api.gql(
        "mutation($id: ID!) { cancelRun(id: $id, cascade: false) { id } }",
        {"id": parent},
        token=tenant.token,
    )
    await watch.until(parent, settled, timeout=30)
    rows = await sessions.all(text("SELECT id FROM runs WHERE parent_id = :p"), p=UUID(parent))
    for row in rows:
        child = await watch.until(str(row["id"]), settled, timeout=60)
        assert child.status == RunStatus.SUCCEEDED


async def test_depth_is_at_most_eight(
    api: Api, tenant: TenantHandle, watch: NudgeWatch, worker: Any
) -> None:
    root = await start(api, tenant, "family", "deep", mode="nest", depth=9)
    done = await watch.until(root, settled, timeout=90)
    assert done.status == RunStatus.FAILED
    assert done.error is not None
    assert "at most 8 levels" in done.error


async def test_a_childs_settle_nudges_its_parent(
    api: Api, sessions: Sessions, tenant: TenantHandle, watch: NudgeWatch, worker: Any
) -> None:
    parent = await start(api, tenant, "family", "nudged", mode="spawn-and-wait")
    await watch.until(parent, lambda r: r.status == RunStatus.WAITING, timeout=60)
    watch.seen.clear()  # it waits for a signal now: only its child's settle can change it
    (child,) = await sessions.all(text("SELECT id FROM runs WHERE parent_id = :p"), p=UUID(parent))

    async def parent_nudged() -> dict[str, Any] | None:
        return next(
            (n for n in watch.seen if n["type"] == "run.updated" and n.get("id") == parent), None
        )

    await watch.until_true(parent_nudged, 30, "a run.updated nudge for the parent")
    settled_child = await watch.until(str(child["id"]), settled, timeout=5)
    assert settled_child.status == RunStatus.SUCCEEDED
    timeline = [e.type for e in await events(sessions, parent)]
    assert timeline[-1] == "child_settled"
    read = await tree(api, tenant, parent)
    assert read["status"] == "WAITING"
    assert read["waitingFor"] == "go"
