"""A fan-out under faults: a parent maps over 60 children (15 live at once) while one of two real
worker processes is SIGKILLed twice (once 10 children settled, once 30) and Redis is flushed
once. No child is started twice, each runs to completion once, the parent succeeds with every
output in input order, and it held no worker while it waited. (`bench/children.py` runs the
issue's 1,000 children, 50 at once.)"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from uuid import UUID

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services import runs as runs_service
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, WorkerProcesses, settled

pytestmark = pytest.mark.timeout(240)
CHILDREN, PARALLEL = 60, 15
FAMILY = "tests.children_agents:AGENTS"


@pytest.fixture
def settings(servers: Servers) -> Settings:
    """The API knows the `family` agent too."""
    return make_settings(servers, agent_modules=[FAMILY])


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcesses]:
    with WorkerProcesses.of(
        settings, tmp_path, concurrency=16, OUTLIVE_AGENT_MODULES=FAMILY
    ) as processes:
        yield processes


def started(events: list[runs_service.EventRecord]) -> int:
    return sum(e.type == "child_started" for e in events)


async def test_a_parent_killed_after_each_child_it_starts_is_making_progress_and_succeeds(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
) -> None:
    """CONTRACT §7 (round four): a lost attempt counts towards the 3 that fail a run only when
    it completed no step; a child it started is such a step (keyed by step name and occurrence).
    Attempt k starts child k and is SIGKILLed while it holds its worker, four times: the parent
    kept making progress, and succeeds. (Before: failed at the third loss, "its worker was lost
    3 times", which `bench/children.py`'s fan-out met under SIGKILLs.) At least 4 losses: on a
    loaded 2-core CI machine a fresh worker's heartbeat may miss this test's 2 s lease once, and
    that take-over is a fifth loss (CI saw 5), which the run survives just the same."""
    assert settings.redis_url is not None
    worker = workers.start()
    input = {"mode": "spawn-then-linger", "turns": 4, "delayMs": 10_000}
    parent = (await api.start_run(tenant.token, "family", input))["run"]["id"]
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        for kills in range(1, 5):
            await watch.until_events(parent, lambda es, n=kills: started(es) >= n, timeout=60)
            await workers.kill(worker)
            worker = workers.start()
        run = await watch.until(parent, settled, timeout=90)
    assert run.status == "SUCCEEDED", run.error
    assert run.lost_attempts >= 4
    assert len(run.output["children"]) == 4


async def test_a_fan_out_survives_worker_kills_and_a_redis_flush(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    input = {
        "turns": 1,
        "delayMs": 300,
        "children": CHILDREN,
        "childTurns": 2,
        "maxParallel": PARALLEL,
    }
    workers.start()
    victim = workers.start()
    parent = (await api.start_run(tenant.token, "demo", input))["run"]["id"]
    kill_at = [10, 30]  # children settled: the kills come with the fan-out's progress
    flushed, kills = False, 0
    waiting, held_while_waiting = 0, 0
    while True:
        run = await runs_service.read_run(sessions, TenantId(tenant.id), RunId(UUID(parent)))
        assert run is not None
        if not run.is_active:
            break
        if run.status == "WAITING":  # parked for its children: no attempt, no lease
            waiting += 1
            held_while_waiting += run.lease_expires_at is not None
        if kill_at and run.children_settled >= kill_at[0]:
            kill_at.pop(0)
            await workers.kill(victim)
            kills += 1
            victim = workers.start()
            if kills == 2 and not flushed:
                redis = Redis.from_url(settings.redis_url)
                await redis.flushdb()
                await redis.aclose()
                flushed = True
        await asyncio.sleep(0.1)  # a sampling interval, not a wait for an event
    assert run.status == "SUCCEEDED", run.error
    assert kills >= 2
    assert flushed
    outputs = run.output["childOutputs"]
    assert [o["childIndex"] for o in outputs] == list(range(CHILDREN))
    duplicates = await sessions.all(
        text(
            "SELECT parent_step FROM runs WHERE parent_id = :p GROUP BY parent_step"
            " HAVING count(*) > 1"
        ),
        p=UUID(parent),
    )
    assert duplicates == []
    twice = await sessions.all(
        text(
            "SELECT r.id, count(e.seq) AS n FROM runs r LEFT JOIN run_events e"
            " ON e.run_id = r.id AND e.type = 'succeeded' WHERE r.parent_id = :p"
            " GROUP BY r.id HAVING count(e.seq) <> 1"
        ),
        p=UUID(parent),
    )
    assert twice == []
    assert waiting > 0
    assert held_while_waiting == 0
