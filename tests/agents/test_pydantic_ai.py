"""`outlive.agents.pydantic_ai.durable` against pydantic-ai's `FunctionModel` (no network),
attempts delivered by hand: each model request and each tool call is a durable step, a tool that
needs approval parks the run WAITING on the signal `approval`, and the text goes to `answer`."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from redis.asyncio import Redis

from outlive.agents.pydantic_ai import durable
from outlive.agents.registry import AgentRegistry
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.realtime.outputs import OutputStore
from outlive.services import waits
from outlive.workflows.runs import WorkflowDeps
from tests.conftest import make_settings
from tests.support import Servers, TenantHandle
from tests.workflows.test_claim import NoInstances, read
from tests.workflows.test_lease import deliver, start, timeline


class Ask(BaseModel):
    message: str


class Script:
    """A scripted model: look the order up, ask for a refund (needs approval), then answer."""

    def __init__(self) -> None:
        self.asked = 0
        self.tools: Counter[str] = Counter()

    def replies(self, messages: list[ModelMessage]) -> list[Any]:
        self.asked += 1
        returned = [
            p for m in messages if isinstance(m, ModelRequest) for p in m.parts
            if isinstance(p, ToolReturnPart)
        ]  # fmt: skip
        if not returned:
            return [ToolCallPart("lookup_order", {"order": "A-1"}, tool_call_id="c1")]
        if len(returned) == 1:
            return [ToolCallPart("refund", {"order": "A-1"}, tool_call_id="c2")]
        return [TextPart(f"Done: {returned[-1].model_response_str()}")]

    async def request(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=self.replies(messages))

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for part in self.replies(messages):
            if isinstance(part, TextPart):
                for word in part.content.split(" "):
                    yield word + " "
            else:
                yield {
                    0: DeltaToolCall(
                        part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }


def support_agent(script: Script) -> PydanticAgent[None, str]:
    agent = PydanticAgent(FunctionModel(script.request, stream_function=script.stream))

    @agent.tool_plain
    def lookup_order(order: str) -> dict[str, Any]:
        script.tools["lookup_order"] += 1
        return {"order": order, "total": 42}

    @agent.tool_plain(requires_approval=True)
    def refund(order: str) -> str:
        script.tools["refund"] += 1
        return f"refunded {order}"

    return agent


@pytest.fixture
async def harness(
    servers: Servers, sessions: Sessions
) -> AsyncIterator[tuple[Script, WorkflowDeps]]:
    script = Script()
    agent = durable(support_agent(script), name="demo", input_model=Ask, prompt=lambda p: p.message)
    settings = make_settings(servers, run_heartbeat_s=30, run_retry_delay_s=0.01)
    redis = Redis.from_url(servers.redis_url)
    async with httpx.AsyncClient() as http:
        yield (
            script,
            WorkflowDeps(
                sessions=sessions,
                agents=AgentRegistry([agent]),
                http=http,
                settings=settings,
                outputs=OutputStore.of(redis, settings),
            ),
        )
    await redis.aclose()


async def approve(sessions: Sessions, tenant: TenantHandle, run_id: RunId, **payload: Any) -> None:
    """The approval, bound to the wait of the call it decides (as the console sends it)."""
    wait_id = waits.wait_id_of(await read(sessions, tenant, run_id))
    async with sessions.unit(tenant.id) as uow:
        await waits.signal_run(
            uow, run_id, name="approval", payload=payload, idempotency_key=None,
            instances=NoInstances(), wait_id=wait_id,
        )  # fmt: skip


async def test_an_approved_tool_runs_once_and_no_model_request_is_asked_twice(
    harness: tuple[Script, WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    script, deps = harness
    run_id = await start(sessions, tenant, {"message": "refund A-1"})

    assert await deliver(deps, run_id) == "done"  # parks: refund waits for approval
    waiting = await read(sessions, tenant, run_id)
    asked_before_approval = script.asked
    await approve(sessions, tenant, run_id, approved=True)
    assert await deliver(deps, run_id) == "done"  # replays the journal, then refunds
    run = await read(sessions, tenant, run_id)
    kinds = [t for t, _ in await timeline(sessions, run_id)]
    chunks = await deps.outputs.read_after(run_id, None)  # type: ignore[union-attr]

    assert waiting.status == RunStatus.WAITING
    assert waiting.waiting_for == "approval"
    assert asked_before_approval == 2
    assert script.asked == 3  # the two recorded requests came from the journal
    assert script.tools == {"lookup_order": 1, "refund": 1}
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"output": "Done: refunded A-1 "}
    assert kinds.count("message") == 3
    assert kinds.count("tool") == 2
    assert "".join(c.text for c in chunks if c.kind == "text") == "Done: refunded A-1 "
    calls = [json.loads(c.text) for c in chunks if c.kind == "tool_call"]
    results = [json.loads(c.text) for c in chunks if c.kind == "tool_result"]
    assert calls == [
        {"id": "c1", "tool": "lookup_order", "args": {"order": "A-1"}},
        {"id": "c2", "tool": "refund", "args": {"order": "A-1"}},
    ]
    assert [(r["id"], r["outcome"], r["result"]) for r in results] == [
        ("c1", "return", {"order": "A-1", "total": 42}),
        ("c2", "return", "refunded A-1"),
    ]
    assert [c.done for c in chunks].count(True) == 5  # one stream per model request and tool
    assert {c.attempt for c in chunks} == {1, 2}
    assert not any(c.reset for c in chunks)


async def test_a_rejected_tool_is_not_run_and_the_model_reads_the_reason(
    harness: tuple[Script, WorkflowDeps], sessions: Sessions, tenant: TenantHandle
) -> None:
    script, deps = harness
    run_id = await start(sessions, tenant, {"message": "refund A-1"})
    assert await deliver(deps, run_id) == "done"
    await approve(sessions, tenant, run_id, approved=False, reason="over the limit")
    assert await deliver(deps, run_id) == "done"
    run = await read(sessions, tenant, run_id)

    assert script.tools == {"lookup_order": 1}
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"output": "Done: over the limit "}
