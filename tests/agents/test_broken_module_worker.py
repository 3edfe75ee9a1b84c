"""A real `outlive worker` whose agent modules include one that fails to import (issue 40): it
starts, logs the failure, and runs every other agent's runs to success; the broken agent's run
waits QUEUED, using no attempt."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.ids import RunId, TenantId
from outlive.services import runs as runs_service
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, WorkerProcesses, settled
from tests.workflows.test_claim import NoInstances

pytestmark = pytest.mark.timeout(120)
BROKEN = "broken=tests.broken_agents:AGENT"
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers, agent_modules=[BROKEN])


@pytest.fixture
def workers(settings: Settings, tmp_path: Path) -> Iterator[WorkerProcesses]:
    path = os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p)
    with WorkerProcesses.of(
        settings, tmp_path, OUTLIVE_AGENT_MODULES=BROKEN, PYTHONPATH=path
    ) as processes:
        yield processes


def seen_in(path: Path, text: str, timeout: float) -> str:
    """The log once it says `text` (the relay hands the broken run to the queue within about
    10 s of its insert; a log file announces nothing, so it is read again every 0.2 s)."""
    deadline = time.monotonic() + timeout
    while text not in (found := path.read_text()):
        assert time.monotonic() < deadline, f"the worker's log never said {text!r}"
        time.sleep(0.2)
    return found


async def test_a_worker_with_a_broken_agent_module_runs_the_other_agents(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    assert settings.redis_url is not None
    async with sessions.unit(tenant.id) as uow:
        broken = await runs_service.start_run(
            uow, agent="broken", params={}, instances=NoInstances()
        )
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        worker = workers.start()
        started = await api.start_run(tenant.token, "demo", {"turns": 2, "delayMs": 10})
        run = await watch.until(started["run"]["id"], settled, timeout=60)
    said = "agent 'broken' is unavailable here"
    log = await asyncio.to_thread(seen_in, tmp_path / "worker-0.log", said, 40)
    waiting = await runs_service.read_run(sessions, TenantId(tenant.id), RunId(broken.run.id))

    assert worker.poll() is None  # still up
    assert run.status == "SUCCEEDED"
    assert waiting is not None
    assert waiting.status == "QUEUED"
    assert waiting.attempt == 0
    assert "agent code tests.broken_agents:AGENT failed to load" in log
    assert "OPENAI_API_KEY is not set" in log
