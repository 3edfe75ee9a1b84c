"""Run keys: one active run per (tenant, agent, key), and the five strategies of a second start."""

from __future__ import annotations

import itertools

import pytest

from outlive.agents.demo import AGENT as DEMO
from outlive.db.tx import Sessions
from outlive.services.runs import RunRecord
from tests.keys.support import read, rows, start
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle


def _settled(run: RunRecord) -> bool:
    return not run.is_active


async def test_each_key_has_its_own_active_run_and_no_key_keeps_the_seed_s_rule(
    api: Api, tenant: TenantHandle, sessions: Sessions
) -> None:
    a = await start(api, tenant.token, {"delayMs": 60_000}, key="user:a")
    b = await start(api, tenant.token, {"delayMs": 60_000}, key="user:b")
    plain = await start(api, tenant.token, {"delayMs": 60_000})
    assert [a["created"], b["created"], plain["created"]] == [True, True, True]
    assert (a["run"]["key"], plain["run"]["key"]) == ("user:a", "")
    again = await start(api, tenant.token, key="user:a")
    assert again == {"created": False, "run": a["run"]}
    assert (await start(api, tenant.token))["run"]["id"] == plain["run"]["id"]
    count = await rows(sessions, "SELECT count(*) AS n FROM runs WHERE tenant_id = :t", t=tenant.id)
    assert count[0]["n"] == 3


async def test_reject_names_the_active_run_and_writes_nothing(
    api: Api, tenant: TenantHandle, sessions: Sessions
) -> None:
    first = await start(api, tenant.token, {"delayMs": 60_000}, key="k")
    with pytest.raises(GraphQLError) as refused:
        await start(api, tenant.token, key="k", onConflict="REJECT")
    (error,) = refused.value.errors
    assert error["extensions"]["code"] == "RUN_ACTIVE"
    assert error["extensions"]["runId"] == first["run"]["id"]
    count = await rows(sessions, "SELECT count(*) AS n FROM runs WHERE tenant_id = :t", t=tenant.id)
    assert count[0]["n"] == 1
    other = await start(api, tenant.token, key="k2", onConflict="REJECT")
    assert other["created"] is True


async def test_enqueue_runs_a_key_s_runs_one_at_a_time_in_order(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: object, worker: object
) -> None:
    started = [
        await start(api, tenant.token, {"turns": 1, "delayMs": 300}, key="q", onConflict="ENQUEUE")
        for _ in range(3)
    ]
    assert all(s["created"] for s in started)
    ids = [s["run"]["id"] for s in started]
    assert started[1]["run"]["queuedBehindId"] == ids[0]
    assert started[2]["run"]["queuedBehindId"] == ids[1]
    behind = await read(api, tenant.token, ids[2])
    assert "queued behind run" in behind["waitingReason"]
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:  # type: ignore[attr-defined]
        last = await watch.until(ids[2], _settled, timeout=60)
    assert last.status == "SUCCEEDED"
    runs = [await read(api, tenant.token, i) for i in ids]
    assert [r["status"] for r in runs] == ["SUCCEEDED"] * 3
    for ahead, after in itertools.pairwise(runs):
        assert ahead["finishedAt"] <= after["startedAt"]  # one at a time, in order
    events = await rows(
        sessions, "SELECT type FROM run_events WHERE run_id = :r ORDER BY seq", r=last.id
    )
    assert [e["type"] for e in events][:2] == ["line", "claimed"]  # its turn came, it ran


async def test_cancel_previous_cancels_the_line_and_the_newest_runs(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: object, worker: object
) -> None:
    first = await start(api, tenant.token, {"turns": 100, "delayMs": 100}, key="c")
    queued = await start(api, tenant.token, {"turns": 1}, key="c", onConflict="ENQUEUE")
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:  # type: ignore[attr-defined]
        await watch.until(first["run"]["id"], lambda r: r.status == "RUNNING", timeout=60)
        newest = await start(
            api, tenant.token, {"turns": 1, "delayMs": 0}, key="c", onConflict="CANCEL_PREVIOUS"
        )
        assert newest["created"] is True
        assert newest["run"]["queuedBehindId"] == first["run"]["id"]
        done = await watch.until(newest["run"]["id"], _settled, timeout=60)
    assert done.status == "SUCCEEDED"
    assert (await read(api, tenant.token, first["run"]["id"]))["status"] == "CANCELLED"
    assert (await read(api, tenant.token, queued["run"]["id"]))["status"] == "CANCELLED"


async def test_signal_existing_delivers_the_input_to_the_active_run(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: object, worker: object
) -> None:
    first = await start(api, tenant.token, {"turns": 1, "awaitSignal": "input"}, key="s")
    steer = {"turns": 2, "delayMs": 5}
    second = await start(api, tenant.token, steer, key="s", onConflict="SIGNAL_EXISTING")
    assert second["created"] is False
    assert second["run"]["id"] == first["run"]["id"]
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:  # type: ignore[attr-defined]
        done = await watch.until(first["run"]["id"], _settled, timeout=60)
    assert done.status == "SUCCEEDED"
    assert done.output["signal"] == DEMO.validate(steer)  # the validated input, defaults and all
    # With no active run, the same start is a new run with that input.
    third = await start(api, tenant.token, steer, key="s", onConflict="SIGNAL_EXISTING")
    assert third["created"] is True
    assert third["run"]["input"]["turns"] == 2
