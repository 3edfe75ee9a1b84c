"""GenAI spans of a pydantic-ai agent's tool call (`execute_tool`) and of child runs
(`invoke_workflow`), in-process to an in-memory exporter; off without the opt-in."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.telemetry import genai, tracing
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

pytestmark = pytest.mark.timeout(90)
OPT_IN = "gen_ai_latest_experimental"


@pytest.fixture
def settings(servers: Servers) -> Settings:
    return make_settings(
        servers,
        agent_modules=["tests.telemetry.genai_agents:TOOLBOT"],
        otel_semconv_stability_opt_in=OPT_IN,
    )


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    try:
        yield exporter
    finally:
        tracing.configure(None)
        genai.opt_in("")
        provider.shutdown()


async def _settle(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle, agent: str, input_: Any
) -> Any:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        run_id = (await api.start_run(tenant.token, agent, input_))["run"]["id"]
        return await watch.until(run_id, settled, timeout=60)


def _of(spans: InMemorySpanExporter, operation: str) -> list[ReadableSpan]:
    return [
        s
        for s in spans.get_finished_spans()
        if (s.attributes or {}).get("gen_ai.operation.name") == operation
    ]


async def test_a_tool_call_is_execute_tool_and_its_model_requests_are_chat(
    spans: InMemorySpanExporter,
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    worker: Any,
) -> None:
    run = await _settle(api, settings, sessions, tenant, "toolbot", {"q": "what is 41 + 1?"})

    assert run.status == "SUCCEEDED", run.error
    (tool,) = _of(spans, "execute_tool")
    chats = _of(spans, "chat")
    (agent,) = _of(spans, "invoke_agent")
    assert tool.name == "execute_tool lookup"
    assert tool.attributes is not None
    assert tool.attributes["gen_ai.tool.name"] == "lookup"
    assert tool.attributes["gen_ai.tool.call.id"] == "call-1"
    assert tool.attributes["gen_ai.conversation.id"] == str(run.id)
    assert [c.name for c in chats] == ["chat scripted", "chat scripted"]
    assert all(c.parent is not None and c.parent.span_id == agent.context.span_id for c in chats)
    assert agent.name == "invoke_agent toolbot"


async def test_children_are_invoke_workflow(
    spans: InMemorySpanExporter,
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    worker: Any,
) -> None:
    demo = {"turns": 1, "delayMs": 0, "children": 2, "childTurns": 1}
    run = await _settle(api, settings, sessions, tenant, "demo", demo)

    assert run.status == "SUCCEEDED", run.error
    workflows = _of(spans, "invoke_workflow")
    agents = _of(spans, "invoke_agent")
    assert workflows
    assert {w.name for w in workflows} == {"invoke_workflow demo"}
    assert {(w.attributes or {}).get("gen_ai.workflow.name") for w in workflows} == {"demo"}
    ids = {(a.attributes or {}).get("outlive.run_id") for a in agents}
    assert len(ids) == 3  # the parent and its two children


async def test_without_the_opt_in_there_is_no_genai_span(
    spans: InMemorySpanExporter,
    api: Api,
    servers: Servers,
    sessions: Sessions,
    tenant: TenantHandle,
) -> None:
    from outlive.worker import WorkerHost

    plain = make_settings(servers)
    host = WorkerHost(plain, concurrency=2)
    await host.start()
    try:
        run = await _settle(api, plain, sessions, tenant, "demo", {"turns": 1, "delayMs": 0})
    finally:
        await host.stop()

    assert run.status == "SUCCEEDED"
    assert spans.get_finished_spans()  # traced: the run attempt, its nudges
    assert not [
        s for s in spans.get_finished_spans() if "gen_ai.operation.name" in (s.attributes or {})
    ]
