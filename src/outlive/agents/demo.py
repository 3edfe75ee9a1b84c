"""The `demo` agent (contract §6): turns of a sleep and a `turn` event, with knobs for failure.

Each turn is a durable step (`ctx.step("turn", ...)`): an attempt that follows a retry or a lost
worker answers the turns already done from the journal and resumes at the first unfinished one,
so each turn's `turn` event (emitted inside the step, written with it) appears exactly once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext
from outlive.errors import RetryableFault


class DemoInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    turns: int = Field(3, ge=1, le=1000, description="how many turns to run")
    delay_ms: int = Field(200, ge=0, le=600_000, description="sleep before each turn's event")
    fail_at_turn: int | None = Field(None, ge=1, description="a non-retryable error at this turn")
    flaky_attempts: int | None = Field(
        None, ge=0, description="a retryable fault at turn 1 while attempt <= this"
    )


class DemoFailure(Exception):
    """The failure `failAtTurn` asks for; not retryable."""


async def play_turn(ctx: RunContext, params: DemoInput, turn: int) -> int:
    """One turn, run as a durable step: only when no earlier attempt recorded it."""
    await ctx.checkpoint()
    if turn == 1 and params.flaky_attempts and ctx.attempt <= params.flaky_attempts:
        raise RetryableFault(f"flaky fault at turn 1, attempt {ctx.attempt}")
    if params.fail_at_turn == turn:
        raise DemoFailure(f"failing at turn {turn} as asked")
    if params.delay_ms:
        await ctx.sleep(params.delay_ms / 1000)
    await ctx.emit("turn", {"turn": turn})
    return turn


async def run(ctx: RunContext, params: DemoInput) -> dict[str, Any]:
    for turn in range(1, params.turns + 1):
        await ctx.step("turn", play_turn, ctx, params, turn)
    return {"turns": params.turns}


AGENT = Agent(
    name="demo",
    description="Runs `turns` turns, each sleeping `delayMs` then appending a `turn` event.",
    input_model=DemoInput,
    run=run,
)
