"""Usage is counted once across a real SIGKILL: the worker running a `demo` run that records
usage each turn (`usagePerTurn`) is killed mid-run; another worker takes it over, and
`Run.usage` and `usageTokens` sum to exactly one turn's usage per turn."""

from __future__ import annotations

from pathlib import Path

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.support import Api, NudgeWatch, TenantHandle, WorkerProcesses, settled
from tests.workflows.test_steps_crash import step_events, workers

__all__ = ["workers"]  # the fixture, shared

pytestmark = pytest.mark.timeout(120)
TURNS = 6
PER_TURN = {"inputTokens": 11, "outputTokens": 7}


async def test_usage_sums_exactly_after_a_sigkill_mid_run(
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
        input = {"turns": TURNS, "delayMs": 500, "usagePerTurn": PER_TURN}
        run_id = (await api.start_run(tenant.token, "demo", input))["run"]["id"]
        await watch.until_events(run_id, lambda es: step_events(es) >= 2, timeout=30)
        await workers.kill(
            first
        )  # turn 3 is in flight: its usage must not count until it is recorded
        workers.start()
        run = await watch.until(run_id, settled, timeout=60)
    assert run.status == "SUCCEEDED"
    assert run.lost_attempts == 1
    data = await api.gql(
        "query($id: ID!) { run(id: $id) { usage { requests inputTokens outputTokens costUsd } }"
        " usageTokens(days: 1) { agent inputTokens outputTokens costUsd } }",
        {"id": run_id},
        token=tenant.token,
    )
    assert data["run"]["usage"] == {
        "requests": TURNS,
        "inputTokens": TURNS * PER_TURN["inputTokens"],
        "outputTokens": TURNS * PER_TURN["outputTokens"],
        "costUsd": None,  # the demo's model is in no price table
    }
    assert data["usageTokens"] == [
        {
            "agent": "demo",
            "inputTokens": TURNS * PER_TURN["inputTokens"],
            "outputTokens": TURNS * PER_TURN["outputTokens"],
            "costUsd": None,
        }
    ]
