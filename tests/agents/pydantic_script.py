"""A scripted pydantic-ai agent for replay tests, run by `durable()` with pydantic-ai's
`FunctionModel` (no network), its attempts delivered by hand.

The model answers turn k (1 + the responses in the history it is sent) from `turns`, records the
history of each request it is sent (`sent`), and can lose the worker at a turn's first request
(`faults`): the request never returns, the test cancels the attempt and expires its lease (as a
dead worker's), and the next delivery takes the run over and replays the journal up to it
(`run_to_end`). Every tool body appends to `ledger`, so a test counts executions.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.exceptions import CallDeferred, ModelRetry
from pydantic_ai.messages import (
    ModelMessage,
    ModelResponse,
    RetryPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, DeltaToolCall, FunctionModel
from pydantic_ai.tools import RunContext

from outlive.agents.pydantic_ai import durable
from outlive.agents.registry import Agent
from outlive.ids import RunId
from outlive.workflows.runs import WorkflowDeps
from tests.workflows.test_claim import expire_lease
from tests.workflows.test_lease import deliver


class Ask(BaseModel):
    message: str


class Strict(BaseModel):
    n: int


Turn = Callable[[], list[Any]]


def call(tool: str, call_id: str, **args: Any) -> Turn:
    return lambda: [ToolCallPart(tool, args, tool_call_id=call_id)]


def text(words: str) -> Turn:
    return lambda: [TextPart(words)]


def history(messages: list[ModelMessage]) -> list[tuple[Any, ...]]:
    """What a request carries, without its timestamps: each part's kind and content."""
    seen: list[tuple[Any, ...]] = []
    for message in messages:
        for part in message.parts:
            if isinstance(part, ToolCallPart):
                seen.append(("call", part.tool_name, part.tool_call_id, part.args_as_json_str()))
            elif isinstance(part, ToolReturnPart):
                seen.append(("return", part.tool_name, part.tool_call_id, str(part.content)))
            elif isinstance(part, RetryPromptPart):
                seen.append(("retry", part.tool_name, part.tool_call_id, part.model_response()))
            elif isinstance(part, TextPart | UserPromptPart):
                seen.append((part.part_kind, str(part.content)))
    return seen


@dataclass
class Script:
    turns: list[Turn]
    faults: set[int] = field(default_factory=set)  # turns whose first request fails
    sent: dict[int, list[list[tuple[Any, ...]]]] = field(default_factory=dict)  # by turn
    ledger: list[str] = field(default_factory=list)
    events: list[str] = field(default_factory=list)  # what the event handler saw
    lost: asyncio.Event = field(default_factory=asyncio.Event)  # a request lost its worker

    async def reply(self, messages: list[ModelMessage]) -> list[Any]:
        k = 1 + sum(isinstance(m, ModelResponse) for m in messages)
        self.sent.setdefault(k, []).append(history(messages))
        if k in self.faults:
            self.faults.discard(k)
            self.lost.set()
            await asyncio.Event().wait()  # the worker is gone: this request never returns
        return self.turns[k - 1]()

    async def request(self, messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        return ModelResponse(parts=await self.reply(messages))

    async def stream(self, messages: list[ModelMessage], info: AgentInfo) -> AsyncIterator[Any]:
        for part in await self.reply(messages):
            if isinstance(part, TextPart):
                for word in part.content.split(" "):
                    yield word + " "
            else:
                yield {
                    0: DeltaToolCall(
                        part.tool_name, part.args_as_json_str(), tool_call_id=part.tool_call_id
                    )
                }

    async def handler(self, ctx: RunContext[Any], events: Any) -> None:
        async for event in events:
            call_id = getattr(event, "tool_call_id", None)
            self.events.append(f"{event.event_kind}:{call_id or ''}")


def tools_agent(script: Script) -> PydanticAgent[None, str]:
    """The outcomes of a tool call, one tool each: `note` returns, `flaky` raises `ModelRetry`
    once, `strict` raises a `ValidationError` once, `external` defers its call, `checked` has an
    args validator that asks for a retry once, `refund` needs an approval."""
    agent = PydanticAgent(FunctionModel(script.request, stream_function=script.stream))
    ledger = script.ledger

    @agent.tool_plain
    def note(n: int) -> str:
        ledger.append(f"note {n}")
        return f"noted {n}"

    @agent.tool_plain
    def flaky(n: int) -> str:
        ledger.append(f"flaky {n}")
        if ledger.count(f"flaky {n}") == 1:
            raise ModelRetry(f"try again with {n}")
        return f"flaky ok {n}"

    @agent.tool_plain
    def strict(n: int) -> str:
        ledger.append(f"strict {n}")
        if ledger.count(f"strict {n}") == 1:
            Strict.model_validate({"n": "not a number"})
        return f"strict ok {n}"

    @agent.tool_plain
    def external(n: int) -> str:
        ledger.append(f"external {n}")
        raise CallDeferred(metadata={"n": n})

    def check(ctx: RunContext[Any], n: int) -> None:
        ledger.append(f"check {n}")
        if ledger.count(f"check {n}") == 1:
            raise ModelRetry(f"check {n} once more")

    @agent.tool_plain(args_validator=check)
    def checked(n: int) -> str:
        ledger.append(f"checked {n}")
        return f"checked {n}"

    @agent.tool_plain(requires_approval=True)
    def refund(order_id: str, amount: float) -> str:
        ledger.append(f"refund {order_id} {amount:.2f}")
        return f"refunded {amount:.2f} for {order_id}"

    return agent


def durable_tools(script: Script, *, events: bool = False) -> Agent[Ask]:
    return durable(
        tools_agent(script),
        name="demo",
        input_model=Ask,
        prompt=lambda p: p.message,
        event_stream_handler=script.handler if events else None,
    )


async def run_to_end(deps: WorkflowDeps, run_id: RunId, script: Script, limit: int = 12) -> None:
    """Deliver the run until a delivery ends it (done, or parked): a delivery whose model request
    lost its worker is cancelled and its lease expired, as a dead worker's, and the next one
    takes the run over."""
    for _ in range(limit):
        script.lost.clear()
        attempt = asyncio.create_task(deliver(deps, run_id))
        lost = asyncio.create_task(script.lost.wait())
        await asyncio.wait({attempt, lost}, return_when=asyncio.FIRST_COMPLETED)
        lost.cancel()
        if attempt.done():
            if attempt.result() == "done":
                return
            continue  # a retry: delivered again
        attempt.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await attempt
        await expire_lease(deps.sessions, run_id)
    raise AssertionError("the run did not get through its attempts")
