"""Durable steps across a real SIGKILL: the worker process running a run is killed between two
steps, another worker takes the run over, and no step the first one completed runs again
(counted in a file outside both processes); the `demo` agent shows each `turn` exactly once."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.services import runs as runs_service
from tests.conftest import make_settings
from tests.support import (
    Api,
    NudgeWatch,
    Servers,
    TenantHandle,
    WorkerProcesses,
    settled,
)

pytestmark = pytest.mark.timeout(120)
COUNTED = "tests.steps_agents:AGENT"


@pytest.fixture
def settings(servers: Servers) -> Settings:
    """The API knows the `counted` agent too."""
    return make_settings(servers, agent_modules=[COUNTED])


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses.of(settings, tmp_path, OUTLIVE_AGENT_MODULES=COUNTED) as processes:
        yield processes


def step_events(events: list[runs_service.EventRecord]) -> int:
    return sum(e.type == "step" for e in events)


async def test_a_sigkill_between_steps_runs_no_completed_step_again(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    counter = tmp_path / "executions.txt"
    first = workers.start()
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        input = {"steps": 6, "delayMs": 400, "counterFile": str(counter)}
        run_id = (await api.start_run(tenant.token, "counted", input))["run"]["id"]
        # killed just after its third step was recorded, 400 ms before the fourth is done
        await watch.until_events(run_id, lambda es: step_events(es) >= 3, timeout=30)
        await workers.kill(first)
        workers.start()
        run = await watch.until(run_id, settled, timeout=60)
    assert run.status == "SUCCEEDED"
    assert run.output == {"squares": [1, 4, 9, 16, 25, 36]}
    assert (run.attempt, run.lost_attempts) == (2, 1)
    executions = [tuple(map(int, line.split())) for line in counter.read_text().splitlines()]
    rows = await sessions.all(
        text("SELECT occurrence, attempt FROM run_steps WHERE run_id = :id ORDER BY seq"),
        id=RunId(run.id),
    )
    recorded = {r["occurrence"]: r["attempt"] for r in rows}
    assert sorted(recorded) == [1, 2, 3, 4, 5, 6]
    assert [recorded[i] for i in (1, 2, 3)] == [1, 1, 1]
    for step, by in recorded.items():  # never executed by an attempt after its recording one
        assert max(a for a, s in executions if s == step) == by, (step, executions)
    assert sorted(s for a, s in executions if a == 2) == [
        s for s in range(1, 7) if recorded[s] == 2
    ]  # the second attempt ran exactly the steps the first had not recorded
    events = await runs_service.list_events(sessions, RunId(run.id))
    assert step_events(events) == 6


async def test_the_demo_killed_after_turn_2_shows_each_turn_exactly_once(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    first = workers.start()
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "demo", {"turns": 6, "delayMs": 500})
        run_id = started["run"]["id"]
        await watch.until_events(run_id, lambda es: step_events(es) >= 2, timeout=30)
        await workers.kill(first)
        workers.start()
        run = await watch.until(run_id, settled, timeout=60)
    assert run.status == "SUCCEEDED"
    assert run.attempt == 2
    events = await runs_service.list_events(sessions, RunId(run.id))
    assert [e.data["turn"] for e in events if e.type == "turn"] == [1, 2, 3, 4, 5, 6]
    assert [e.type for e in events].count("claimed") == 2
    assert [e.seq for e in events] == list(range(1, len(events) + 1))


def claims(events: list[runs_service.EventRecord]) -> int:
    return sum(e.type == "claimed" for e in events)


async def test_a_run_that_completes_a_step_between_four_sigkills_succeeds(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    """CONTRACT §7, round four: a lost attempt that completed a step since its claim does not
    count towards the 3 that fail a run. Each of four workers is killed just after the step its
    attempt completed (a new one every time): the run makes progress, and succeeds."""
    assert settings.redis_url is not None
    counter = tmp_path / "executions.txt"
    worker = workers.start()
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        input = {"steps": 6, "delayMs": 300, "counterFile": str(counter)}
        run_id = (await api.start_run(tenant.token, "counted", input))["run"]["id"]
        for kills in range(1, 5):  # attempt `kills` is killed after recording step `kills`
            await watch.until_events(run_id, lambda es, n=kills: step_events(es) >= n, timeout=60)
            await workers.kill(worker)
            worker = workers.start()
        run = await watch.until(run_id, settled, timeout=90)
    assert run.status == "SUCCEEDED", run.error
    assert run.output == {"squares": [1, 4, 9, 16, 25, 36]}
    assert (run.attempt, run.lost_attempts) == (5, 4)
    rows = await sessions.all(
        text("SELECT occurrence, attempt FROM run_steps WHERE run_id = :id ORDER BY seq"),
        id=RunId(run.id),
    )
    assert [r["attempt"] for r in rows][:4] == [1, 2, 3, 4]  # each lost attempt made progress


async def test_a_run_that_completes_no_step_and_loses_its_worker_3_times_fails(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    """The other side of the rule: three workers killed while the run's first step is still
    running (no attempt completes a step) fail the run, saying so."""
    assert settings.redis_url is not None
    counter = tmp_path / "executions.txt"
    worker = workers.start()
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        input = {"steps": 1, "delayMs": 10_000, "counterFile": str(counter)}
        run_id = (await api.start_run(tenant.token, "counted", input))["run"]["id"]
        for kills in range(1, 4):  # attempt `kills` is killed while its step sleeps
            await watch.until_events(run_id, lambda es, n=kills: claims(es) >= n, timeout=60)
            await workers.kill(worker)
            worker = workers.start()
        run = await watch.until(run_id, settled, timeout=60)
    assert run.status == "FAILED"
    assert run.lost_attempts == 3
    assert run.error is not None
    assert "its worker was lost 3 times without completing a step" in run.error
    assert not counter.exists()  # no step ever completed
