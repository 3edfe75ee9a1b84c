"""Budgets through GraphQL only (contract §7 "Budgets", issue 42): a step whose reservation would
pass a limit does not start; the run is held WAITING for `budget` (never FAILED), resumes by
itself when there is room again (a raised limit, a deleted budget) or on resumeRun(overBudget),
and no recorded step is bought again. CANCEL settles it saying so; WARN goes on."""

from __future__ import annotations

from typing import Any

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, NudgeWatch, Servers, TenantHandle

pytestmark = pytest.mark.timeout(120)

SET = """mutation($i: BudgetInput!) { setBudget(input: $i) {
    id scope target period limitTokens limitUsd warnAt onBreach spentTokens spentUsd
    reservedTokens heldRuns unpricedModels periodStart } }"""
DELETE = "mutation($id: ID!) { deleteBudget(id: $id) }"
BUDGETS = "{ budgets { id spentTokens reservedTokens heldRuns unpricedModels spentUsd } }"
RUN = """query($id: ID!) { run(id: $id) { id status waitingFor heldByBudgetId error
    usage { inputTokens outputTokens } events(first: 1000) { type data } } }"""
RESUME = "mutation($id: ID!, $o: Boolean) { resumeRun(id: $id, overBudget: $o) { id status } }"
TEN = {"inputTokens": 6, "outputTokens": 4}  # a turn of 10 tokens


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers, model_prices='{"demo": {"input": 1000, "output": 2000}}')


async def budget(api: Api, tenant: TenantHandle, **spec: Any) -> dict[str, Any]:
    data = await api.gql(
        SET, {"i": {"period": "DAY", "scope": "TENANT", **spec}}, token=tenant.token
    )
    found: dict[str, Any] = data["setBudget"]
    return found


START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"


async def start(
    api: Api, tenant: TenantHandle, turns: int = 8, *, key: str = "", tags: list[str] | None = None
) -> str:
    input = {"turns": turns, "delayMs": 0, "usagePerTurn": TEN}
    options = {"agent": "demo", "input": input, "key": key or None, "tags": tags}
    started = await api.gql(START, {"i": options}, token=tenant.token)
    return str(started["startRun"]["run"]["id"])


async def read(api: Api, tenant: TenantHandle, run_id: str) -> dict[str, Any]:
    found: dict[str, Any] = (await api.gql(RUN, {"id": run_id}, token=tenant.token))["run"]
    return found


async def until(
    watch: NudgeWatch, api: Api, tenant: TenantHandle, run_id: str, **want: Any
) -> dict[str, Any]:
    async def check() -> dict[str, Any] | None:
        run = await read(api, tenant, run_id)
        return run if all(run[k] == v for k, v in want.items()) else None

    return await watch.until_true(check, 60, f"run {run_id} {want}")


def turns(run: dict[str, Any]) -> list[int]:
    return [e["data"]["turn"] for e in run["events"] if e["type"] == "turn"]


@pytest.fixture
async def watch(settings: Settings, sessions: Sessions, tenant: TenantHandle) -> Any:
    async with NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watching:
        yield watching


@pytest.mark.usefixtures("worker")
async def test_a_step_that_would_pass_the_limit_holds_the_run_and_a_raise_resumes_it(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    made = await budget(api, tenant, limitTokens=25)
    run_id = await start(api, tenant)
    held = await until(watch, api, tenant, run_id, status="WAITING", waitingFor="budget")
    listed = (await api.gql(BUDGETS, token=tenant.token))["budgets"]

    assert held["heldByBudgetId"] == made["id"]
    assert turns(held) == [1, 2]  # 20 recorded; a third turn's 10 would pass 25
    assert held["usage"] == {"inputTokens": 12, "outputTokens": 8}
    assert any(e["type"] == "budget" and e["data"].get("breach") == "PAUSE" for e in held["events"])
    assert listed[0]["spentTokens"] == 20
    assert listed[0]["heldRuns"] == 1
    assert listed[0]["reservedTokens"] == 0  # nothing in flight
    assert listed[0]["unpricedModels"] == []  # priced by OUTLIVE_MODEL_PRICES

    again = await budget(api, tenant, limitTokens=1000)  # the same budget, raised
    done = await until(watch, api, tenant, run_id, status="SUCCEEDED")
    assert again["id"] == made["id"]
    assert turns(done) == list(range(1, 9))  # each turn once: none bought again
    assert done["usage"] == {"inputTokens": 48, "outputTokens": 32}


@pytest.mark.usefixtures("worker")
async def test_a_deleted_budget_lets_its_runs_go_and_overbudget_lets_one_finish_past_it(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    made = await budget(api, tenant, limitTokens=15)
    first, second = (
        await start(api, tenant, turns=3, key="a"),
        await start(api, tenant, turns=3, key="b"),
    )
    for run_id in (first, second):
        await until(watch, api, tenant, run_id, status="WAITING", waitingFor="budget")
    with pytest.raises(GraphQLError) as plain:  # a budget's hold needs overBudget
        await api.gql(RESUME, {"id": first}, token=tenant.token)
    assert plain.value.codes == ["BAD_USER_INPUT"]
    await api.gql(RESUME, {"id": first, "o": True}, token=tenant.token)
    finished = await until(watch, api, tenant, first, status="SUCCEEDED")
    assert turns(finished) == [1, 2, 3]  # past the budget, each turn once
    assert (await read(api, tenant, second))["status"] == "WAITING"  # the other still held

    assert (await api.gql(DELETE, {"id": made["id"]}, token=tenant.token))["deleteBudget"]
    other = await until(watch, api, tenant, second, status="SUCCEEDED")
    assert turns(other) == [1, 2, 3]
    assert (await api.gql(BUDGETS, token=tenant.token))["budgets"] == []


@pytest.mark.usefixtures("worker")
async def test_cancel_settles_the_run_saying_so_and_warn_goes_on(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    cancel = await budget(
        api, tenant, scope="AGENT", target="demo", limitTokens=15, onBreach="CANCEL"
    )
    cancelled = await until(
        watch, api, tenant, await start(api, tenant, turns=3, key="c"), status="CANCELLED"
    )
    assert turns(cancelled) == [1]
    assert cancel["id"] in (cancelled["error"] or "")
    await api.gql(DELETE, {"id": cancel["id"]}, token=tenant.token)

    warn = await budget(api, tenant, limitTokens=15, onBreach="WARN", warnAt=0.5)
    warned = await until(
        watch, api, tenant, await start(api, tenant, turns=3, key="w"), status="SUCCEEDED"
    )
    assert turns(warned) == [1, 2, 3]  # WARN: past the limit, it goes on
    warnings = [e for e in warned["events"] if e["type"] == "budget"]
    assert len(warnings) == 1  # once a period
    assert warnings[0]["data"]["budgetId"] == warn["id"]

    async def nudged() -> bool | None:
        seen = [n for n in watch.seen if n["type"] == "budget.updated" and n["id"] == warn["id"]]
        return True if seen else None

    assert await watch.until_true(nudged, 10, "the warning's budget.updated")


@pytest.mark.usefixtures("worker")
async def test_scopes_a_tag_an_agent_and_each_run_on_its_own(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    await budget(api, tenant, scope="TAG", target="user:1", limitTokens=15)
    await budget(api, tenant, scope="RUN", period="RUN", limitTokens=25)
    tagged = await start(api, tenant, turns=3, key="t")
    user_run = await start(api, tenant, turns=3, key="u1", tags=["user:1"])
    held_by_tag = await until(watch, api, tenant, user_run, status="WAITING")
    held_by_itself = await until(watch, api, tenant, tagged, status="WAITING")
    assert turns(held_by_tag) == [1]  # its tag's budget: 15
    assert turns(held_by_itself) == [1, 2]  # untagged: only its own 25 per run


async def test_bad_budgets_are_refused_and_write_nothing(api: Api, tenant: TenantHandle) -> None:
    for bad in (
        {"scope": "TENANT", "period": "DAY"},  # no limit
        {"scope": "AGENT", "period": "DAY", "limitTokens": 1},  # no target
        {"scope": "TENANT", "period": "DAY", "target": "x", "limitTokens": 1},
        {"scope": "RUN", "period": "DAY", "limitTokens": 1},
        {"scope": "TENANT", "period": "RUN", "limitTokens": 1},
        {"scope": "TENANT", "period": "DAY", "limitTokens": 0},
        {"scope": "TENANT", "period": "DAY", "limitUsd": -1},
        {"scope": "TENANT", "period": "DAY", "limitTokens": 1, "warnAt": 1.5},
        {"scope": "TAG", "period": "DAY", "target": "has space", "limitTokens": 1},
    ):
        with pytest.raises(GraphQLError) as refused:
            await api.gql(SET, {"i": bad}, token=tenant.token)
        assert refused.value.codes == ["BAD_USER_INPUT"], bad
    assert (await api.gql(BUDGETS, token=tenant.token))["budgets"] == []
