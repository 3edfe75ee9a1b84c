"""The `demo` agent (contract §6): turns of a delay and a `turn` event, with knobs for failure,
a durable sleep after turn 1 (`pauseMs`) and a wait for a signal after the last (`awaitSignal`).

Each turn is a durable step (`ctx.step("turn", ...)`): an attempt that follows a retry, a lost
worker or a wake from WAITING answers the turns already done from the journal and resumes at the
first unfinished one, so each turn's `turn` event (emitted inside the step, written with it)
appears exactly once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext
from outlive.errors import RetryableFault


class TurnUsage(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    input_tokens: int = Field(0, ge=0, le=10_000_000)
    output_tokens: int = Field(0, ge=0, le=10_000_000)


class DemoInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    turns: int = Field(3, ge=1, le=1000, description="how many turns to run")
    delay_ms: int = Field(200, ge=0, le=600_000, description="sleep before each turn's event")
    fail_at_turn: int | None = Field(None, ge=1, description="a non-retryable error at this turn")
    flaky_attempts: int | None = Field(
        None, ge=0, description="a retryable fault at turn 1 while attempt <= this"
    )
    pause_ms: int | None = Field(
        None, ge=0, le=86_400_000, description="after turn 1, a durable sleep this long (WAITING)"
    )
    await_signal: str | None = Field(
        None,
        min_length=1,
        max_length=128,
        description="after the last turn, wait (WAITING) for a signal of this name",
    )
    signal_timeout_s: int = Field(
        3600, ge=1, le=2_592_000, description="how long to wait for the signal at most"
    )
    usage_per_turn: TurnUsage | None = Field(
        None, description="each turn records this model usage (for tests of Run.usage)"
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
        await ctx.delay(params.delay_ms / 1000)
    if params.usage_per_turn is not None:
        ctx.record_usage(
            input_tokens=params.usage_per_turn.input_tokens,
            output_tokens=params.usage_per_turn.output_tokens,
            model="demo",
        )
    await ctx.emit("turn", {"turn": turn})
    return turn


async def run(ctx: RunContext, params: DemoInput) -> dict[str, Any]:
    for turn in range(1, params.turns + 1):
        await ctx.step("turn", play_turn, ctx, params, turn)
        if turn == 1 and params.pause_ms:
            await ctx.sleep(params.pause_ms / 1000)
    if params.await_signal is None:
        return {"turns": params.turns}
    payload = await ctx.wait_for(
        params.await_signal, timeout=params.signal_timeout_s, default=_TIMED_OUT
    )
    timed_out = payload is _TIMED_OUT
    return {"turns": params.turns, "signal": None if timed_out else payload, "timedOut": timed_out}


_TIMED_OUT = object()


AGENT = Agent(
    name="demo",
    description="Runs `turns` turns, each sleeping `delayMs` then appending a `turn` event;"
    " `pauseMs` sleeps durably after turn 1, `awaitSignal` waits for a signal after the last.",
    input_model=DemoInput,
    run=run,
)
