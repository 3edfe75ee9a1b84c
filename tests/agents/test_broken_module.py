"""An agent module that fails to import is isolated (issue 40, round five F11): it is logged and
marked unavailable with its error (`agents`), `startRun` refuses it, its runs wait QUEUED without
using an attempt, and every other agent runs. The worker-process version is
`test_broken_module_worker.py` (slow)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import httpx
import pytest

from outlive.agents import demo
from outlive.agents.registry import AgentRegistry
from outlive.config import Settings
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.services import runs as runs_service
from outlive.workflows.runs import WorkflowDeps
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, Servers, TenantHandle
from tests.workflows.test_claim import NoInstances, read
from tests.workflows.test_lease import deliver, start

BROKEN = "broken=tests.broken_agents:AGENT"
AGENTS = "{ agents { name available loadError } }"


def test_a_module_that_fails_to_import_leaves_the_other_agents_loaded() -> None:
    registry = AgentRegistry.from_entry_points([BROKEN, "tests.keyed_agents:AGENT"])

    assert {a.name for a in registry} >= {"demo", "llm", "conversation"}
    assert registry.unavailable == {"broken": "RuntimeError: OPENAI_API_KEY is not set"}
    assert registry.get("broken") is None


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(servers, agent_modules=[BROKEN])


async def test_agents_shows_it_unavailable_with_its_error_and_start_run_refuses_it(
    api: Api, tenant: TenantHandle
) -> None:
    listed = {a["name"]: a for a in (await api.gql(AGENTS, token=tenant.token))["agents"]}
    with pytest.raises(GraphQLError) as refused:
        await api.start_run(tenant.token, "broken", {})

    assert listed["broken"] == {
        "name": "broken",
        "available": False,
        "loadError": "RuntimeError: OPENAI_API_KEY is not set",
    }
    assert listed["demo"]["available"] is True
    assert listed["demo"]["loadError"] is None
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert "unavailable" in str(refused.value)


async def test_a_run_of_the_broken_agent_says_why_it_waits(
    api: Api, sessions: Sessions, tenant: TenantHandle
) -> None:
    async with sessions.unit(tenant.id) as uow:
        broken = await runs_service.start_run(
            uow, agent="broken", params={}, instances=NoInstances()
        )
    read_back = await api.gql(
        "query($id: ID!) { run(id: $id) { status waitingReason } }",
        {"id": str(broken.run.id)},
        token=tenant.token,
    )

    assert read_back["run"] == {
        "status": "QUEUED",
        "waitingReason": "its agent's code failed to load (RuntimeError: OPENAI_API_KEY is not"
        " set); it waits for a fix",
    }


@pytest.fixture
async def deps(settings: Settings, sessions: Sessions) -> AsyncIterator[WorkflowDeps]:
    registry = AgentRegistry([demo.AGENT], {"broken": "RuntimeError: OPENAI_API_KEY is not set"})
    async with httpx.AsyncClient() as http:
        yield WorkflowDeps(sessions=sessions, agents=registry, http=http, settings=settings)


async def test_its_runs_wait_queued_using_no_attempt_while_the_others_run(
    deps: WorkflowDeps, sessions: Sessions, tenant: TenantHandle
) -> None:
    async with sessions.unit(tenant.id) as uow:
        broken = await runs_service.start_run(
            uow, agent="broken", params={}, instances=NoInstances()
        )  # written before its code broke, say
    other = await start(sessions, tenant, {"turns": 1, "delayMs": 0})

    assert await deliver(deps, broken.run.id) == "retry later"  # not claimed, not failed
    assert await deliver(deps, other) == "done"
    waiting = await read(sessions, tenant, broken.run.id)
    assert waiting.status == RunStatus.QUEUED
    assert waiting.attempt == 0
    assert (await read(sessions, tenant, other)).status == RunStatus.SUCCEEDED
