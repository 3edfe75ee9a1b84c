"""An agent that declares its key and strategy (`Agent(key=..., on_conflict=...)`): the demo,
one line per conversation. Loaded with `OUTLIVE_AGENT_MODULES=tests.keyed_agents:AGENT`."""

from __future__ import annotations

from typing import Any

from pydantic import Field

from outlive.agents import demo
from outlive.agents.registry import Agent, RunContext
from outlive.db.models import RunConflict


class ConversationInput(demo.DemoInput):
    conversation_id: str = Field(min_length=1, max_length=100)


async def _run(ctx: RunContext, params: ConversationInput) -> Any:
    return await demo.run(ctx, params)


AGENT = Agent(
    name="conversation",
    description="the demo, one line per conversation",
    input_model=ConversationInput,
    run=_run,
    key=lambda params: f"conversation:{params.conversation_id}",
    on_conflict=RunConflict.ENQUEUE,
)
