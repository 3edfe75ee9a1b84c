"""`durable()` replays exactly (issue 40), attempts delivered by hand against `FunctionModel`:

- approvals are bound to the tool call: an unbound approval is refused while a deferred call
  waits, a malformed payload or a misspelt name is refused at `signalRun` and the run keeps
  waiting, and `waitingShow` names the call a person decides;
- every outcome of a tool call (returned, `ModelRetry`, `ValidationError`, an args validator's
  retry, `CallDeferred`) is recorded and replayed without running the tool: an attempt lost
  after each of them sends the model the history of an undisturbed run;
- the event handler sees each event once across lost attempts and approvals.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from redis.asyncio import Redis

from outlive.agents.pydantic_ai import durable
from outlive.agents.registry import Agent, AgentRegistry
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.errors import BadUserInput
from outlive.ids import RunId
from outlive.realtime.outputs import OutputStore
from outlive.services import waits
from outlive.workflows.runs import WorkflowDeps
from tests.agents.pydantic_script import Ask, Script, call, durable_tools, run_to_end, text
from tests.conftest import make_settings
from tests.support import Servers, TenantHandle
from tests.workflows.test_claim import NoInstances, read
from tests.workflows.test_lease import deliver, start, timeline

Harness = Callable[[Agent[Any]], WorkflowDeps]


@pytest.fixture
async def harness(servers: Servers, sessions: Sessions) -> AsyncIterator[Harness]:
    settings = make_settings(servers, run_heartbeat_s=30, run_retry_delay_s=0.01)
    redis = Redis.from_url(servers.redis_url)
    async with httpx.AsyncClient() as http:

        def deps(agent: Agent[Any]) -> WorkflowDeps:
            return WorkflowDeps(
                sessions=sessions,
                agents=AgentRegistry([agent]),
                http=http,
                settings=settings,
                outputs=OutputStore.of(redis, settings),
            )

        yield deps
    await redis.aclose()


async def signal(
    deps: WorkflowDeps,
    tenant: TenantHandle,
    run_id: RunId,
    name: str,
    payload: Any,
    *,
    wait_id: str | None = None,
    key: str | None = None,
) -> bool:
    """`signalRun` as the resolver makes it: checked against what the agent declares."""
    async with deps.sessions.unit(tenant.id) as uow:
        result = await waits.signal_run(
            uow, run_id, name=name, payload=payload, idempotency_key=key,
            instances=NoInstances(), wait_id=wait_id, check=deps.agents.check_signal,
        )  # fmt: skip
    return result.accepted


REFUNDS = [
    call("refund", "c1", order_id="A-1", amount=42.0),
    call("refund", "c2", order_id="A-2", amount=900.0),
    text("all done"),
]


async def test_two_unbound_approvals_are_refused_and_the_later_refund_waits_for_a_person(
    harness: Harness, tenant: TenantHandle
) -> None:
    script = Script(list(REFUNDS))
    deps = harness(durable_tools(script))
    run_id = await start(deps.sessions, tenant, {"message": "refund A-1, then A-2"})
    await deliver(deps, run_id)
    first = await read(deps.sessions, tenant, run_id)
    refused = []
    for _ in range(2):  # a double click, or a client's retry with a fresh key
        with pytest.raises(BadUserInput) as caught:
            await signal(deps, tenant, run_id, "approval", {"approved": True})
        refused.append(caught.value.message)
    bound = await signal(deps, tenant, run_id, "approval", {"approved": True}, wait_id="call-c1")
    again = await signal(deps, tenant, run_id, "approval", {"approved": True}, wait_id="call-c1")
    await deliver(deps, run_id)
    second = await read(deps.sessions, tenant, run_id)
    kinds = [t for t, _ in await timeline(deps.sessions, run_id)]

    assert first.status == RunStatus.WAITING
    assert waits.wait_id_of(first) == "call-c1"
    assert first.waiting_show == {
        "tool": "refund", "args": {"order_id": "A-1", "amount": 42.0}, "toolCallId": "c1"
    }  # fmt: skip
    assert "pass waitId 'call-c1'" in refused[0]
    assert (bound, again) == (True, False)  # one decision per call
    assert script.ledger == ["refund A-1 42.00"]  # the second refund was shown to nobody
    assert second.status == RunStatus.WAITING
    assert waits.wait_id_of(second) == "call-c2"
    assert second.waiting_show["args"] == {"order_id": "A-2", "amount": 900.0}
    assert kinds.count("signal") == 1


async def test_a_malformed_or_misspelt_approval_is_refused_and_the_run_keeps_waiting(
    harness: Harness, tenant: TenantHandle
) -> None:
    script = Script(list(REFUNDS))
    deps = harness(durable_tools(script))
    run_id = await start(deps.sessions, tenant, {"message": "refund A-1"})
    await deliver(deps, run_id)
    errors = []
    for name, payload in [("approval", {"ok": True}), ("aproval", {"approved": True})]:
        with pytest.raises(BadUserInput) as caught:
            await signal(deps, tenant, run_id, name, payload, wait_id="call-c1")
        errors.append(caught.value.message)
    with pytest.raises(BadUserInput):  # a wait the run has not begun
        await signal(deps, tenant, run_id, "approval", {"approved": True}, wait_id="call-c2")
    waiting = await read(deps.sessions, tenant, run_id)
    kinds = [t for t, _ in await timeline(deps.sessions, run_id)]
    denied = await signal(
        deps, tenant, run_id, "approval", {"approved": False, "reason": "no"}, wait_id="call-c1"
    )
    await deliver(deps, run_id)

    assert "approved: Field required" in errors[0]
    assert "waits for no signal 'aproval'" in errors[1]
    assert waiting.status == RunStatus.WAITING
    assert "signal" not in kinds  # nothing was kept
    assert denied is True
    assert script.ledger == []  # denied: the refund never ran
    assert (await read(deps.sessions, tenant, run_id)).waiting_show["toolCallId"] == "c2"


OUTCOMES = [
    call("note", "c1", n=1),  # returns
    call("flaky", "c2", n=1),  # ModelRetry
    call("flaky", "c3", n=1),
    call("strict", "c4", n=1),  # ValidationError
    call("strict", "c5", n=1),
    call("checked", "c6", n=1),  # its args validator asks for a retry
    call("checked", "c7", n=1),
    call("external", "c8", n=1),  # deferred: answered by a signal
    text("all done"),
]


async def test_each_tool_outcome_is_replayed_without_running_the_tool_again(
    harness: Harness, tenant: TenantHandle
) -> None:
    calm = Script(list(OUTCOMES))
    calm_deps = harness(durable_tools(calm))
    calm_id = await start(calm_deps.sessions, tenant, {"message": "go"})
    await run_to_end(calm_deps, calm_id, calm)
    await signal(calm_deps, tenant, calm_id, "tool_result", {"result": 8}, wait_id="call-c8")
    await run_to_end(calm_deps, calm_id, calm)

    lost = Script(list(OUTCOMES), faults={2, 3, 4, 6, 8, 9})  # lost after each outcome
    deps = harness(durable_tools(lost))
    run_id = await start(deps.sessions, tenant, {"message": "go"})
    await run_to_end(deps, run_id, lost)
    await signal(deps, tenant, run_id, "tool_result", {"result": 8}, wait_id="call-c8")
    await run_to_end(deps, run_id, lost)
    run = await read(deps.sessions, tenant, run_id)
    tools = [d for t, d in await timeline(deps.sessions, run_id) if t == "tool"]

    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.output == {"output": "all done "}  # the stream's words, as the model wrote them
    assert Counter(lost.ledger) == Counter(calm.ledger)  # each body ran once, as undisturbed
    assert Counter(lost.ledger) == {
        "note 1": 1, "flaky 1": 2, "strict 1": 2, "check 1": 2, "checked 1": 1, "external 1": 1
    }  # fmt: skip
    for k, requests in lost.sent.items():  # the history of an undisturbed run, every time
        assert all(r == calm.sent[k][0] for r in requests), k
    assert [len(r) for _, r in sorted(lost.sent.items())] == [1, 2, 2, 2, 1, 2, 1, 2, 2]
    assert [t["outcome"] for t in tools] == [
        "return", "model_retry", "return", "validation_error", "return", "return",
        "call_deferred",
    ]  # fmt: skip


async def test_the_event_handler_sees_each_event_once_across_lost_attempts_and_approvals(
    harness: Harness, tenant: TenantHandle
) -> None:
    turns = [
        call("note", "c1", n=1),
        call("refund", "c2", order_id="A-1", amount=42.0),
        call("note", "c3", n=2),
        call("refund", "c4", order_id="A-2", amount=5.0),
        text("all done"),
    ]
    calm = Script(list(turns))
    lost = Script(list(turns), faults={2, 3, 5})  # lost before a reply is recorded, 3 times
    for script in (calm, lost):  # one after the other: they share the agent's default key
        deps = harness(durable_tools(script, events=True))
        run_id = await start(deps.sessions, tenant, {"message": "go"})
        await run_to_end(deps, run_id, script)
        await signal(deps, tenant, run_id, "approval", {"approved": True}, wait_id="call-c2")
        await run_to_end(deps, run_id, script)
        await signal(deps, tenant, run_id, "approval", {"approved": True}, wait_id="call-c4")
        await run_to_end(deps, run_id, script)
        assert (await read(deps.sessions, tenant, run_id)).status == RunStatus.SUCCEEDED

    assert lost.events == calm.events  # once each, in the same order
    assert Counter(lost.events)["function_tool_result:c3"] == 1
    assert Counter(lost.events)["part_start:"] == 5  # one per model response


class Resolution(BaseModel):
    refunded: bool
    note: str


async def test_a_structured_output_streams_as_it_is_written(
    harness: Harness, tenant: TenantHandle
) -> None:
    """Issue 40: the output tool's arguments (the structured output) reach `runOutput` as they
    are written (`kind: "output"`), beside the tool calls (`tool_call`), not only at the end."""
    args = '{"refunded": true, "note": "done for A-1"}'

    async def stream(messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        if not any(isinstance(m, ModelResponse) for m in messages):
            yield {0: DeltaToolCall("note", '{"n": 1}', tool_call_id="c1")}
            return
        name = info.output_tools[0].name
        for i in range(0, len(args), 7):  # the JSON in pieces, as a model writes it
            yield {0: DeltaToolCall(name if i == 0 else None, args[i : i + 7], tool_call_id="o1")}

    agent = PydanticAgent(FunctionModel(stream_function=stream), output_type=Resolution)

    @agent.tool_plain
    def note(n: int) -> str:
        return f"noted {n}"

    deps = harness(durable(agent, name="demo", input_model=Ask, prompt=lambda p: p.message))
    run_id = await start(deps.sessions, tenant, {"message": "refund A-1"})
    await deliver(deps, run_id)
    run = await read(deps.sessions, tenant, run_id)
    chunks = await deps.outputs.read_after(run_id, None)  # type: ignore[union-attr]

    assert run.output == {"output": {"refunded": True, "note": "done for A-1"}}
    assert "".join(c.text for c in chunks if c.kind == "output") == args
    assert len([c for c in chunks if c.kind == "output"]) >= 1
    assert [json.loads(c.text)["tool"] for c in chunks if c.kind == "tool_call"] == ["note"]
