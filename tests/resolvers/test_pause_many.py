"""A hundred RUNNING runs paused at once (issue 42, "Done when"): no step starts after its run's
pause committed, checked against each step's start time (`run_steps.started_at`, PostgreSQL's
clock at the gate) and the pause's (`runs.paused_at`, PostgreSQL's clock once the run's row is
locked: after any gate that held it); the pauses survive a Redis FLUSHALL; resumeRun brings each
back, and each turn is played once."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.worker import WorkerHost
from tests.conftest import make_settings, with_own_database
from tests.support import Api, NudgeWatch, Servers, TenantHandle

pytestmark = pytest.mark.timeout(300)

RUNS = 100
TURNS = 40
START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
PAUSE = "mutation($id: ID!) { pauseRun(id: $id) { id pausedAt } }"
RESUME = "mutation($id: ID!) { resumeRun(id: $id) { id } }"
STATUSES = text("SELECT status, waiting_for, count(*) AS n FROM runs GROUP BY 1, 2")
# Steps that started after their run's pause committed: the rule says none.
LATE_STEPS = text(
    "SELECT s.run_id, s.occurrence, s.started_at, r.paused_at FROM run_steps s"
    " JOIN runs r ON r.id = s.run_id WHERE s.started_at > r.paused_at"
)
TURNS_PLAYED = text(
    "SELECT run_id, array_agg((data->>'turn')::int ORDER BY seq) AS turns FROM run_events"
    " WHERE type = 'turn' GROUP BY run_id"
)


@pytest.fixture
async def servers(servers: Servers) -> Servers:
    """A database of its own: the counts that say where the runs are, the late steps and the
    turns played are this test's runs' alone (another test's SUCCEEDED runs made "every run
    finished" true while some of these still ran)."""
    return await with_own_database(servers)


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(
        servers, tenant_max_running_runs=RUNS, db_pool_size=40, db_raw_pool_size=40
    )


@pytest.fixture
async def many(settings: Settings) -> AsyncIterator[WorkerHost]:
    host = WorkerHost(settings, concurrency=RUNS)
    await host.start()
    yield host
    await host.stop()


async def counts(sessions: Sessions) -> dict[str, int]:
    rows = await sessions.all(STATUSES)
    return {f"{r['status']}/{r['waiting_for']}": int(r["n"]) for r in rows}


async def until(watch: NudgeWatch, sessions: Sessions, want: str, what: str) -> None:
    async def check() -> bool | None:
        return True if (await counts(sessions)).get(want) == RUNS else None

    try:
        await watch.until_true(check, 180, what)
    except AssertionError as error:  # say where the runs were instead
        raise AssertionError(f"{error}: {await counts(sessions)}") from None


@pytest.mark.usefixtures("many")
async def test_no_step_starts_after_its_runs_pause_committed_and_resume_brings_each_back(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: Settings
) -> None:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        ids = []
        for i in range(RUNS):
            input = {"turns": TURNS, "delayMs": 250}
            started = await api.gql(
                START, {"i": {"agent": "demo", "key": f"r{i}", "input": input}}, token=tenant.token
            )
            ids.append(started["startRun"]["run"]["id"])
        await until(watch, sessions, "RUNNING/None", "every run RUNNING")

        async def pause(run_id: str) -> Any:
            return await api.gql(PAUSE, {"id": run_id}, token=tenant.token)

        await asyncio.gather(*(pause(run_id) for run_id in ids))
        async with Redis.from_url(settings.redis_url) as redis:
            await redis.flushdb()  # the pauses are PostgreSQL's: an emptied Redis changes nothing
        await until(watch, sessions, "WAITING/pause", "every run held by its pause")
        late = await sessions.all(LATE_STEPS)
        held_turns = {r["run_id"]: list(r["turns"]) for r in await sessions.all(TURNS_PLAYED)}

        for run_id in ids:
            await api.gql(RESUME, {"id": run_id}, token=tenant.token)
        await until(watch, sessions, "SUCCEEDED/None", "every run resumed and finished")
        played = {r["run_id"]: list(r["turns"]) for r in await sessions.all(TURNS_PLAYED)}

    assert late == []  # no step started after its run's pause committed
    assert sum(len(t) for t in held_turns.values()) < RUNS * TURNS  # the pauses stopped work
    assert len(played) == RUNS
    assert all(t == list(range(1, TURNS + 1)) for t in played.values())  # each turn once
