"""The same work for both systems of `bench/peers.py`: a workflow of `steps` steps, each one's
body sleeping `delay_ms` and then appending `<workflow> <step>` to `counter_file` (when given:
the bodies that finished, counted outside the process a crash kills), then an optional durable
sleep of `sleep_s`, after which the workflow returns when it went on (`wokeAt`, wall clock): the
bench compares it with the wake time each system recorded for the sleep."""

from __future__ import annotations

import asyncio
import os
import time
from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext


def body_done(counter_file: str | None, workflow: str, step: int) -> None:
    if not counter_file:
        return
    fd = os.open(counter_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    try:
        os.write(fd, f"{workflow} {step}\n".encode())
    finally:
        os.close(fd)


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
