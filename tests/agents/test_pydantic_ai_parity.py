"""What pydantic-ai's Temporal and DBOS integrations let a run choose, `durable()` lets it choose
too (issue 40, item 7), attempts delivered by hand against `FunctionModel` (and a stub on
loopback for a provider's key): a key and a conflict strategy per conversation, a model from an
allow-list, model settings, usage limits and a message history from the input, a provider per
tenant, a timeout and a retry policy per tool, an MCP-like toolset listed in steps, and a chat
that waits for its next message in one run."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from openai import AsyncOpenAI
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.providers.openai import OpenAIProvider
from pydantic_ai.tools import RunContext as ToolContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.external import TOOL_SCHEMA_VALIDATOR
from pydantic_ai.usage import UsageLimits
from sqlalchemy import text

from outlive.agents.policy import Retry
from outlive.agents.pydantic_ai import Chat, ToolPolicy, durable
from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.db.models import RunConflict, RunStatus
from outlive.db.tx import Sessions
from outlive.errors import BadUserInput
from outlive.ids import RunId
from outlive.services import starts
from outlive.services.runs.keys import start_options
from outlive.workflows.runs import WorkflowDeps
from tests.agents.pydantic_script import Script, call, run_to_end
from tests.agents.pydantic_script import text as says
from tests.agents.script_stub import Says, ScriptStub
from tests.conftest import make_settings
from tests.support import Servers, TenantHandle, loopback_server
from tests.workflows.test_claim import NoInstances, read
from tests.workflows.test_lease import deliver, timeline

pytestmark = pytest.mark.timeout(60)
ADMIT = text(
    "UPDATE runs SET dispatched_at = now() WHERE tenant_id = :tenant AND status = 'QUEUED'"
    " AND dispatched_at IS NULL"
)


class Chatting(BaseModel):
    conversation: str = "c"
    message: str
    model: str | None = None
    temperature: float | None = None
    history: list[dict[str, Any]] | None = None


def said(messages: list[ModelMessage]) -> list[str]:
    """The user's messages and the model's words, in order."""
    words: list[str] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, UserPromptPart | TextPart):
                words.append(str(part.content))
    return words


class Harness:
    def __init__(self, sessions: Sessions, settings: Any, http: httpx.AsyncClient) -> None:
        self.sessions, self.settings, self.http = sessions, settings, http
        self.redis_url = settings.redis_url

    def deps(self, *agents: Agent[Any]) -> WorkflowDeps:
        return WorkflowDeps(
            sessions=self.sessions, agents=AgentRegistry(agents), http=self.http,
            settings=self.settings,
        )  # fmt: skip

    async def begin(
        self, deps: WorkflowDeps, tenant: TenantHandle, agent: str, given: dict[str, Any]
    ) -> tuple[RunId, bool]:
        """`startRun` as the resolver makes it: validated, keyed as the agent says."""
        found = deps.agents.require(agent)
        params = found.validate(given)
        options = start_options(
            key=None, default_key=found.default_key(params), on_conflict=None,
            default_on_conflict=found.on_conflict, tags=None, idempotency_key=None,
        )  # fmt: skip
        async with self.sessions.unit(tenant.id) as uow:
            started = await starts.start(
                uow, agent=agent, params=params, instances=NoInstances(), options=options
            )
        async with self.sessions.unit() as uow:  # what the dispatch after the commit does
            await uow.execute(ADMIT, tenant=tenant.id)
        return started.run.id, started.created


@pytest.fixture
async def harness(servers: Servers, sessions: Sessions) -> AsyncIterator[Harness]:
    settings = make_settings(servers, run_heartbeat_s=30, run_retry_delay_s=0.01)
    async with httpx.AsyncClient() as http:
        yield Harness(sessions, settings, http)


def echo(name: str, seen: list[Any]) -> FunctionModel:
    """A model that answers with its name and the last user message, noting what it was sent."""

    async def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        seen.append((name, said(messages), info.model_settings))
        return ModelResponse(parts=[TextPart(f"{name}: {said(messages)[-1]}")])

    return FunctionModel(answer, model_name=name)


async def test_each_conversation_gets_its_own_run_and_a_model_from_the_allow_list(
    harness: Harness, tenant: TenantHandle
) -> None:
    seen: list[Any] = []
    agent = durable(
        PydanticAgent(echo("default", seen)),
        name="support",
        input_model=Chatting,
        prompt=lambda p: p.message,
        stream=None,
        key=lambda p: f"conversation:{p.conversation}",
        on_conflict=RunConflict.RETURN_EXISTING,
        models={"fast": echo("fast", seen), "smart": echo("smart", seen)},
        choose_model=lambda p: p.model,
        model_settings=lambda p: {"temperature": p.temperature} if p.temperature else None,
    )
    deps = harness.deps(agent)
    starts_ = [
        await harness.begin(deps, tenant, "support", {"conversation": f"u{i}", "message": "hi"})
        for i in range(6)
    ]
    again = await harness.begin(deps, tenant, "support", {"conversation": "u1", "message": "x"})
    with pytest.raises(BadUserInput) as refused:
        await harness.begin(deps, tenant, "support", {"message": "hi", "model": "gpt-9"})
    chosen, _ = await harness.begin(
        deps, tenant, "support", {"conversation": "z", "message": "hi", "model": "smart",
                                  "temperature": 0.25},
    )  # fmt: skip
    await deliver(deps, chosen)
    await deliver(deps, starts_[0][0])

    assert [created for _, created in starts_] == [True] * 6  # 6 users, 6 runs (F9)
    assert len({run for run, _ in starts_}) == 6
    assert again == (starts_[1][0], False)  # the same conversation: its run, handed back
    assert "model 'gpt-9' is not allowed (allowed: fast, smart)" in refused.value.message
    assert (await read(harness.sessions, tenant, chosen)).output == {"output": "smart: hi"}
    assert seen[0][0] == "smart"
    assert seen[0][2] == {"temperature": 0.25}
    assert seen[1][0] == "default"


async def test_a_run_starts_from_the_message_history_its_input_carries(
    harness: Harness, tenant: TenantHandle
) -> None:
    seen: list[Any] = []
    history = ModelMessagesTypeAdapter.dump_python(
        [
            ModelRequest(parts=[UserPromptPart("my order is A-1")]),
            ModelResponse(parts=[TextPart("noted: A-1")]),
        ],
        mode="json",
    )
    agent = durable(
        PydanticAgent(echo("m", seen)), name="support", input_model=Chatting,
        prompt=lambda p: p.message, message_history=lambda p: p.history, stream=None,
    )  # fmt: skip
    deps = harness.deps(agent)
    run_id, _ = await harness.begin(
        deps, tenant, "support", {"message": "refund it", "history": history}
    )
    await deliver(deps, run_id)

    assert seen[0][1] == ["my order is A-1", "noted: A-1", "refund it"]


async def test_usage_limits_stop_a_run_that_would_ask_the_model_too_often(
    harness: Harness, tenant: TenantHandle
) -> None:
    async def loop(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=[ToolCallPart("again", {}, tool_call_id=f"c{len(messages)}")])

    inner = PydanticAgent(FunctionModel(loop))

    @inner.tool_plain
    def again() -> str:
        return "again"

    agent = durable(
        inner, name="support", input_model=Chatting, prompt=lambda p: p.message,
        usage_limits=UsageLimits(request_limit=3), stream=None,
    )  # fmt: skip
    deps = harness.deps(agent)
    run_id, _ = await harness.begin(deps, tenant, "support", {"message": "go"})
    await deliver(deps, run_id)
    run = await read(harness.sessions, tenant, run_id)

    assert run.status == RunStatus.FAILED
    assert run.error is not None
    assert "request_limit of 3" in run.error


async def test_each_tenant_reaches_its_provider_with_its_own_key(
    harness: Harness, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    stub = ScriptStub([Says("hello")])
    async with loopback_server(stub.app) as base:
        url = base + "/v1"

        def provider(ctx: RunContext, name: str) -> OpenAIProvider:
            key = f"sk-{ctx.tenant_id}"  # a vault lookup, in a real deployment
            client = AsyncOpenAI(base_url=url, api_key=key, http_client=ctx.http, max_retries=0)
            return OpenAIProvider(openai_client=client)

        agent = durable(
            PydanticAgent(), name="support", input_model=Chatting, prompt=lambda p: p.message,
            models={"mini": "openai-chat:gpt-4o-mini"}, choose_model=lambda p: p.model,
            provider_factory=provider,
        )  # fmt: skip
        deps = harness.deps(agent)
        for who in (tenant, other_tenant):
            run_id, _ = await harness.begin(
                deps, who, "support", {"message": "hi", "model": "mini"}
            )
            await deliver(deps, run_id)
            done = await read(harness.sessions, who, run_id)
            assert done.status == RunStatus.SUCCEEDED, done.error

    assert stub.keys == [f"Bearer sk-{tenant.id}", f"Bearer sk-{other_tenant.id}"]


async def test_a_tool_has_its_own_timeout_and_retry_policy(
    harness: Harness, tenant: TenantHandle
) -> None:
    calls: list[str] = []

    async def model(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        if len(messages) == 1:
            return ModelResponse(parts=[ToolCallPart("lookup", {}, tool_call_id="c1")])
        return ModelResponse(parts=[TextPart("found it")])

    inner = PydanticAgent(FunctionModel(model))

    @inner.tool_plain
    async def lookup() -> str:
        calls.append("lookup")
        if len(calls) == 1:
            await asyncio.sleep(30)  # hangs: the step's timeout ends it
        return "found"

    agent = durable(
        inner, name="support", input_model=Chatting, prompt=lambda p: p.message,
        tool_policies={"lookup": ToolPolicy(timeout=0.2, retry=Retry(3, 0.01))}, stream=None,
    )  # fmt: skip
    deps = harness.deps(agent)
    run_id, _ = await harness.begin(deps, tenant, "support", {"message": "go"})
    await deliver(deps, run_id)
    run = await read(harness.sessions, tenant, run_id)
    events = await timeline(harness.sessions, run_id)

    assert run.status == RunStatus.SUCCEEDED
    assert calls == ["lookup", "lookup"]  # timed out once, then answered, in one attempt
    assert run.attempt == 1
    assert [d["step"] for t, d in events if t == "retrying"] == ["tool.lookup"]


class Remote(AbstractToolset[Any]):
    """A toolset whose listing and calls are I/O, as an MCP server's are: each counted."""

    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()

    @property
    def id(self) -> str:
        return "remote"

    async def __aenter__(self) -> Remote:
        self.counts["connect"] += 1
        return self

    async def __aexit__(self, *args: Any) -> None:
        return None

    async def get_tools(self, ctx: ToolContext[Any]) -> dict[str, ToolsetTool[Any]]:
        self.counts["list"] += 1
        schema = {"type": "object", "properties": {"q": {"type": "string"}}}
        tool = ToolDefinition(name="search", parameters_json_schema=schema)
        return {
            "search": ToolsetTool(
                toolset=self, tool_def=tool, max_retries=1, args_validator=TOOL_SCHEMA_VALIDATOR
            )
        }

    async def call_tool(
        self, name: str, tool_args: dict[str, Any], ctx: ToolContext[Any], tool: Any
    ) -> Any:
        self.counts["call"] += 1
        return f"results for {tool_args['q']}"


async def test_a_remote_toolsets_listing_and_calls_are_steps_a_replay_does_not_repeat(
    harness: Harness, tenant: TenantHandle
) -> None:
    remote = Remote()
    turns = [call("search", "c1", q="q1"), call("search", "c2", q="q2"), says("done")]
    script = Script(turns, faults={3})  # the worker is lost at the third request
    model = FunctionModel(script.request, stream_function=script.stream)
    agent = durable(
        PydanticAgent(model, toolsets=[remote]), name="support", input_model=Chatting,
        prompt=lambda p: p.message,
    )  # fmt: skip
    deps = harness.deps(agent)
    run_id, _ = await harness.begin(deps, tenant, "support", {"message": "go"})
    await run_to_end(deps, run_id, script)
    run = await read(harness.sessions, tenant, run_id)

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.lost_attempts == 1
    assert [len(script.sent[k]) for k in (1, 2, 3)] == [1, 1, 2]  # replayed after the loss
    # All of it in the first attempt: one connection, a listing before each of its 3 requests,
    # 2 calls (each looking its tool up: the default `get_tool_for_tool_def` lists). The replay
    # took every listing and call from the journal: it neither listed nor connected.
    assert remote.counts == {"connect": 1, "list": 5, "call": 2}


async def test_a_chat_answers_each_message_of_its_conversation_in_one_run(
    harness: Harness, tenant: TenantHandle
) -> None:
    seen: list[Any] = []
    agent = durable(
        PydanticAgent(echo("m", seen)), name="support", input_model=Chatting,
        prompt=lambda p: p.message, key=lambda p: f"conversation:{p.conversation}",
        on_conflict=RunConflict.SIGNAL_EXISTING, chat=Chat(idle_s=3600, max_turns=3),
        stream=None,
    )  # fmt: skip
    deps = harness.deps(agent)
    runs = []
    for message in ("hello", "my order is A-1", "refund it"):
        run_id, created = await harness.begin(
            deps, tenant, "support", {"conversation": "u1", "message": message}
        )
        runs.append((run_id, created))
        await deliver(deps, run_id)
    run = await read(harness.sessions, tenant, runs[0][0])
    turns = [d for t, d in await timeline(harness.sessions, run.id) if t == "turn"]

    assert [created for _, created in runs] == [True, False, False]
    assert len({run_id for run_id, _ in runs}) == 1
    assert run.status == RunStatus.SUCCEEDED
    assert run.output == {"output": "m: refund it", "turns": 3}
    assert [t["output"] for t in turns] == ["m: hello", "m: my order is A-1", "m: refund it"]
    assert seen[-1][1] == [
        "hello", "m: hello", "my order is A-1", "m: my order is A-1", "refund it"
    ]  # fmt: skip
    assert len(seen) == 3  # each answer asked once: the earlier ones came from the journal
