"""An agent for the durable-step tests that kill real worker processes: each step appends a line
`<attempt> <step>` to a file named by the run's input once its work is done, so what ran, and in
which attempt, is counted outside the process that is killed. Loaded with
`OUTLIVE_AGENT_MODULES=tests.steps_agents:AGENT`."""

from __future__ import annotations

import asyncio
import os
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext


class CountedInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    steps: int = Field(6, ge=1, le=100)
    delay_ms: int = Field(300, ge=0, le=10_000)
    counter_file: str


async def work(ctx: RunContext, params: CountedInput, i: int) -> int:
    await asyncio.sleep(params.delay_ms / 1000)
    fd = os.open(params.counter_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{ctx.attempt} {i}\n".encode())
    finally:
        os.close(fd)
    return i * i


async def run(ctx: RunContext, params: CountedInput) -> dict[str, Any]:
    squares = [await ctx.step("work", work, ctx, params, i) for i in range(1, params.steps + 1)]
    return {"squares": squares}


AGENT = Agent(
    name="counted",
    description="Steps that count their executions in a file.",
    input_model=CountedInput,
    run=run,
)
