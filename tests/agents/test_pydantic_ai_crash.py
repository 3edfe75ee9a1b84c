"""The example pydantic-ai agent (`examples.support`) against a real OpenAI-compatible stub on
loopback, its worker SIGKILLed three times in one run: during a model request, during a tool
call, and while the run is WAITING for an approval. The run succeeds; the stub is asked again
only for the request in flight at a kill; a tool that completed runs once; the approval is
taken once. Everything is counted by the stub, in this process, outside the killed workers."""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.services import runs as runs_service
from tests.agents.openai_stub import REPLY, Stub
from tests.conftest import make_settings
from tests.support import (
    Api,
    NudgeWatch,
    Servers,
    TenantHandle,
    WorkerProcesses,
    loopback_server,
    settled,
)

pytestmark = pytest.mark.timeout(150)
EXAMPLE = "examples.support:AGENT"
ROOT = str(Path(__file__).resolve().parents[2])


@pytest.fixture
async def stub() -> AsyncIterator[tuple[Stub, str]]:
    served = Stub()
    async with loopback_server(served.app) as url:
        yield served, url
        served.release_all()


@pytest.fixture
def settings(servers: Servers, stub: tuple[Stub, str]) -> Settings:
    return make_settings(servers, agent_modules=[EXAMPLE], llm_base_url=stub[1] + "/v1")


@pytest.fixture
def workers(
    settings: Settings, stub: tuple[Stub, str], tmp_path: Path
) -> Iterator[WorkerProcesses]:
    url = stub[1]
    with WorkerProcesses.of(
        settings,
        tmp_path,
        OUTLIVE_AGENT_MODULES=EXAMPLE,
        OUTLIVE_LLM_BASE_URL=url + "/v1",
        OUTLIVE_LLM_API_KEY="sk-stub",
        SUPPORT_SHOP_URL=url,
        PYTHONPATH=os.pathsep.join(p for p in (ROOT, os.environ.get("PYTHONPATH")) if p),
    ) as processes:
        yield processes


async def test_the_example_agent_survives_three_sigkills_asking_and_refunding_once(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[Stub, str],
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    served, _ = stub
    assert settings.redis_url is not None
    first_request = served.hold("chat.1")
    lookup = served.hold("lookup")
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        worker = workers.start()
        message = {"message": "Please refund order A-1"}
        run_id = (await api.start_run(tenant.token, "support", message))["run"]["id"]
        await asyncio.wait_for(first_request.wait(), 60)  # 1: during a model request
        await workers.kill(worker)
        served.release("chat.1")
        worker = workers.start()
        await asyncio.wait_for(lookup.wait(), 60)  # 2: during a tool call
        await workers.kill(worker)
        served.release("lookup")
        worker = workers.start()
        waiting = await watch.until(run_id, lambda r: r.status == "WAITING", timeout=60)
        await workers.kill(worker)  # 3: while WAITING for the approval
        workers.start()
        signal_run = """mutation($i: SignalRunInput!) { signalRun(input: $i) { accepted } }"""
        answer = {
            "id": run_id,
            "name": "approval",
            "payload": {"approved": True},
            "waitId": "call-call_2",  # bound to the call it decides: `refund`'s tool call id
        }
        accepted = await api.gql(signal_run, {"i": answer}, token=tenant.token)
        run = await watch.until(run_id, settled, timeout=60)
    events = await runs_service.list_events(sessions, RunId(run.id))

    assert waiting.waiting_for == "approval"
    assert waiting.wait_id == "call-call_2"
    assert waiting.waiting_show == {
        "tool": "refund", "args": {"order_id": "A-1", "amount": 42.0}, "toolCallId": "call_2"
    }  # fmt: skip
    assert accepted["signalRun"]["accepted"] is True
    assert run.status == "SUCCEEDED", run.error
    assert run.output == {"output": REPLY}
    assert served.counts == {
        "chat.1": 2,  # in flight at the first kill: asked again
        "lookup": 2,  # in flight at the second kill: run again
        "chat.2": 1,
        "refund": 1,  # approved once, run once
        "chat.3": 1,
    }
    kinds = [e.type for e in events]
    assert kinds.count("signal") == 1
    assert kinds.count("resumed") == 1  # the approval was taken once
    assert kinds.count("tool") == 2  # lookup_order and refund, each recorded once
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
