"""The agent's event stream handler, called once per event across every attempt.

`durable(agent, event_stream_handler=handler)` runs `handler` as pydantic-ai's Temporal and DBOS
integrations do: the model's events (`PartStartEvent`, `PartDeltaEvent`, …) live, inside the
model request's step (`models.DurableModel`), and every other event (a tool call, a tool result,
the deferred requests, the final result) in a step of its own, named by the event's kind and,
for a tool's events, its call's id (`event.<kind>:<tool_call_id>`). A replay returns those steps
without calling the handler, and gives the agent the recorded model responses whose events the
handler has seen: so a handler that posts to Slack posts each event once, across crashes and
approvals (round five, F4). An event whose step was executing when the worker died is handled
again by the next attempt (a step is executed at least once, recorded at most once).

A handler set on the agent itself (`capabilities=[ProcessEventStream(handler)]`) is the agent's
own code: it runs on every attempt and sees the replayed events too, as under Temporal and DBOS.
"""

from __future__ import annotations

import hashlib
from collections.abc import AsyncIterable, AsyncIterator
from typing import Any

from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.messages import FinalResultEvent, PartDeltaEvent, PartEndEvent, PartStartEvent
from pydantic_ai.tools import RunContext as ToolContext

from outlive.agents.registry import RunContext

MODEL_EVENTS = (PartStartEvent, PartDeltaEvent, PartEndEvent, FinalResultEvent)
MAX_NAME = 200


def step_name(event: Any) -> str:
    """The step an event is handled in: its kind, and its tool call's id when it has one."""
    kind = str(getattr(event, "event_kind", type(event).__name__))
    call_id = getattr(event, "tool_call_id", None)
    name = f"event.{kind}" if call_id is None else f"event.{kind}:{call_id}"
    if len(name) > MAX_NAME:
        name = f"event.{kind}:{hashlib.sha256(str(call_id).encode()).hexdigest()[:32]}"
    return name


class DurableEvents:
    """The run-level event stream handler `durable()` gives `agent.run`: model events were
    handled in their model step (here they are the replay, skipped); each other event is
    handled by the agent's handler in a step of its own."""

    def __init__(self, run: RunContext, handler: EventStreamHandler[Any]) -> None:
        self.run = run
        self.handler = handler

    async def __call__(self, ctx: ToolContext[Any], events: AsyncIterable[Any]) -> None:
        async for event in events:
            if isinstance(event, MODEL_EVENTS):
                continue  # handled live inside its model step
            await self.run.step(step_name(event), self._handle, ctx, event)

    async def _handle(self, ctx: ToolContext[Any], event: Any) -> None:
        await self.handler(ctx, _one(event))


async def _one(event: Any) -> AsyncIterator[Any]:
    yield event
