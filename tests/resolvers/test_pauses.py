"""Pauses through GraphQL (contract §7 "Pauses", issue 42): a pause holds a QUEUED or WAITING run
at once and a RUNNING one at its next step (the step in flight completes and is recorded); a
held run is WAITING for `pause`, holds no worker, keeps its timers but does not resume until
resumeRun; pauseAgent holds the agent's runs and every new one; cancelRun settles a held run at
once; pauses live in PostgreSQL and survive Redis being emptied."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle

pytestmark = [pytest.mark.timeout(120), pytest.mark.usefixtures("worker")]

RUN = """query($id: ID!) { run(id: $id) { id status waitingFor pausedAt wakeAt
    events(first: 1000) { type data } } }"""
PAUSE = "mutation($id: ID!) { pauseRun(id: $id) { id status pausedAt waitingFor } }"
RESUME = "mutation($id: ID!) { resumeRun(id: $id) { id status pausedAt } }"
CANCEL = "mutation($id: ID!) { cancelRun(id: $id) { id status } }"
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id status } } }"


async def start(api: Api, tenant: TenantHandle, key: str, **input: Any) -> str:
    options = {"agent": "demo", "key": key, "input": {"delayMs": 0, **input}}
    return str((await api.gql(START, {"i": options}, token=tenant.token))["startRun"]["run"]["id"])


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


async def test_a_running_run_stops_at_its_next_step_and_resumes_where_it_was(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    run_id = await start(api, tenant, "r", turns=4, delayMs=300)
    await watch.until_events(run_id, lambda e: any(x.type == "turn" for x in e))  # turn 1 done
    paused = (await api.gql(PAUSE, {"id": run_id}, token=tenant.token))["pauseRun"]
    held = await until(watch, api, tenant, run_id, status="WAITING", waitingFor="pause")
    assert paused["pausedAt"] is not None
    assert held["pausedAt"] == paused["pausedAt"]
    done_before = turns(held)
    assert 1 <= len(done_before) < 4  # the step in flight completed; no later one started
    again = await api.gql(PAUSE, {"id": run_id}, token=tenant.token)  # idempotent
    assert again["pauseRun"]["pausedAt"] == paused["pausedAt"]

    await api.gql(RESUME, {"id": run_id}, token=tenant.token)
    done = await until(watch, api, tenant, run_id, status="SUCCEEDED")
    assert turns(done) == [1, 2, 3, 4]  # each once: nothing before the pause ran again


async def test_a_waiting_run_is_held_at_once_and_a_sleep_that_came_due_waits_for_resume(
    api: Api, tenant: TenantHandle, watch: NudgeWatch, settings: Settings
) -> None:
    sleeper = await start(api, tenant, "s", turns=2, pauseMs=1500)
    await until(watch, api, tenant, sleeper, status="WAITING", waitingFor=None)  # asleep
    held = (await api.gql(PAUSE, {"id": sleeper}, token=tenant.token))["pauseRun"]
    assert (held["status"], held["waitingFor"]) == ("WAITING", "pause")
    redis = Redis.from_url(settings.redis_url or "")
    await redis.flushdb()  # the pause is PostgreSQL's: an emptied Redis changes nothing
    await redis.aclose()
    await asyncio.sleep(2)  # its sleep comes due meanwhile: the thing under test is that it waits
    later = await read(api, tenant, sleeper)
    assert (later["status"], later["waitingFor"], later["wakeAt"]) == ("WAITING", "pause", None)
    await api.gql(RESUME, {"id": sleeper}, token=tenant.token)
    done = await until(watch, api, tenant, sleeper, status="SUCCEEDED")
    assert turns(done) == [1, 2]


async def test_pause_agent_holds_its_runs_and_new_ones_and_cancel_settles_a_held_one(
    api: Api, tenant: TenantHandle, watch: NudgeWatch
) -> None:
    waiting = await start(api, tenant, "w", turns=1, awaitSignal="go")
    await until(watch, api, tenant, waiting, status="WAITING", waitingFor="go")
    state = await api.gql(
        'mutation { pauseAgent(agent: "demo") { agent paused pausedAt } }', token=tenant.token
    )
    assert state["pauseAgent"]["paused"] is True
    new = await start(api, tenant, "n", turns=2)  # a new run: held at its first step
    held_new = await until(watch, api, tenant, new, status="WAITING", waitingFor="pause")
    assert turns(held_new) == []
    held = await read(api, tenant, waiting)
    assert held["waitingFor"] == "pause"
    listed = await api.gql(
        "{ runs(paused: true) { edges { node { id } } } agents { name paused }"
        " agentStates { agent paused } }",
        token=tenant.token,
    )
    assert {e["node"]["id"] for e in listed["runs"]["edges"]} == {waiting, new}
    assert {a["name"]: a["paused"] for a in listed["agents"]}["demo"] is True
    with pytest.raises(GraphQLError) as reserved:  # a signal named "pause" cannot resume it
        await api.gql(
            'mutation($id: ID!) { signalRun(input: {id: $id, name: "pause"}) { accepted } }',
            {"id": waiting},
            token=tenant.token,
        )
    assert reserved.value.codes == ["BAD_USER_INPUT"]

    cancelled = (await api.gql(CANCEL, {"id": new}, token=tenant.token))["cancelRun"]
    assert cancelled["status"] == "CANCELLED"  # at once
    await api.gql('mutation { resumeAgent(agent: "demo") { paused } }', token=tenant.token)
    back = await until(watch, api, tenant, waiting, status="WAITING", waitingFor="go")
    assert back["pausedAt"] is None  # back to its own wait, which a signal now answers
    await api.gql(
        'mutation($id: ID!) { signalRun(input: {id: $id, name: "go"}) { accepted } }',
        {"id": waiting},
        token=tenant.token,
    )
    await until(watch, api, tenant, waiting, status="SUCCEEDED")


async def test_a_queued_run_is_held_at_once_and_frees_its_place(
    api: Api, tenant: TenantHandle, watch: NudgeWatch, sessions: Sessions
) -> None:
    await sessions.execute(
        text("UPDATE tenants SET max_running_runs = 1 WHERE id = :t"), t=tenant.id
    )
    busy = await start(api, tenant, "busy", turns=1, delayMs=600_000)
    queued = await start(api, tenant, "q", turns=1)
    assert (await read(api, tenant, queued))["status"] == "QUEUED"  # behind the tenant's cap
    held = (await api.gql(PAUSE, {"id": queued}, token=tenant.token))["pauseRun"]
    assert (held["status"], held["waitingFor"]) == ("WAITING", "pause")
    await api.gql(CANCEL, {"id": busy}, token=tenant.token)
    await api.gql(RESUME, {"id": queued}, token=tenant.token)
    assert turns(await until(watch, api, tenant, queued, status="SUCCEEDED")) == [1]


async def test_another_tenants_run_cannot_be_paused(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    run_id = await start(api, tenant, "x", turns=1, awaitSignal="go")
    for query in (PAUSE, RESUME):
        with pytest.raises(GraphQLError) as refused:
            await api.gql(query, {"id": run_id}, token=other_tenant.token)
        assert refused.value.codes == ["NOT_FOUND"]
