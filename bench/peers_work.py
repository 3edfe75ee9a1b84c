"""The same work for every system of `bench/peers.py`, as Outlive's agent: a workflow of `steps`
steps, each one's body sleeping `delay_ms` and then appending `<workflow> <step>` to
`counter_file` (when given: the bodies that finished, counted outside the process a crash
kills), then an optional durable sleep of `sleep_s`, after which the workflow returns when it
went on (`wokeAt`, wall clock): the bench compares it with the wake time each system recorded
for the sleep. The peers' workers (`peers_<system>_worker.py`) do the same with their SDKs."""

from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peers_body import body_done


class PeerInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    steps: int = Field(10, ge=0, le=1000)
    delay_ms: int = Field(0, ge=0)
    sleep_s: float = Field(0, ge=0)
    counter_file: str | None = None


async def step(ctx: RunContext, params: PeerInput, i: int) -> int:
    if params.delay_ms:
        await asyncio.sleep(params.delay_ms / 1000)
    body_done(params.counter_file, str(ctx.run_id), i)
    return i


async def run(ctx: RunContext, params: PeerInput) -> dict[str, Any]:
    for i in range(params.steps):
        await ctx.step("s", step, ctx, params, i)
    if not params.sleep_s:
        return {"steps": params.steps}
    await ctx.sleep(params.sleep_s)
    return {"wokeAt": time.time()}


AGENT = Agent(
    name="peer",
    description="bench/peers.py: steps, then an optional durable sleep",
    input_model=PeerInput,
    run=run,
)
