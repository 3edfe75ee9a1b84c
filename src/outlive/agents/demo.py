"""The `demo` agent (contract §6): turns of a delay and a `turn` event, with knobs for failure,
a durable sleep after turn 1 (`pauseMs`), child runs after the turns (`children`, through
`ctx.map`) and a wait for a signal after the last (`awaitSignal`).

Each turn is a durable step (`ctx.step("turn", ...)`): an attempt that follows a retry, a lost
worker or a wake from WAITING answers the turns already done from the journal and resumes at the
first unfinished one, so each turn's `turn` event (emitted inside the step, written with it)
appears exactly once."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.policy import Expected
from outlive.agents.registry import Agent, RunContext
from outlive.errors import RetryableFault

ADVANCED: dict[str, Any] = {"x-advanced": True}  # a test knob: the console folds it away


class TurnUsage(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    input_tokens: int = Field(0, ge=0, le=10_000_000)
    output_tokens: int = Field(0, ge=0, le=10_000_000)


class DemoInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    turns: int = Field(3, ge=1, le=1000, description="how many turns to run")
    delay_ms: int = Field(200, ge=0, le=600_000, description="sleep before each turn's event")
    fail_at_turn: int | None = Field(
        None, ge=1, description="a non-retryable error at this turn", json_schema_extra=ADVANCED
    )
    flaky_attempts: int | None = Field(
        None,
        ge=0,
        description="a retryable fault at turn 1 while attempt <= this",
        json_schema_extra=ADVANCED,
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
        3600,
        ge=1,
        le=2_592_000,
        description="how long to wait for the signal at most",
        json_schema_extra=ADVANCED,
    )
    stream_chars: int = Field(
        0, ge=0, le=100_000, description="each turn writes this many characters to `answer`"
    )
    stream_delay_ms: int = Field(
        20,
        ge=0,
        le=10_000,
        description="between two chunks (10 characters) of the stream",
        json_schema_extra=ADVANCED,
    )
    children: int = Field(
        0, ge=0, le=1000, description="after its turns, start this many child runs of demo"
    )
    child_turns: int = Field(1, ge=1, le=100, description="turns of each child run")
    max_parallel: int = Field(
        10, ge=1, le=100, description="child runs live at once", json_schema_extra=ADVANCED
    )
    child_index: int | None = Field(
        None, ge=0, description="echoed in the output", json_schema_extra=ADVANCED
    )
    usage_per_turn: TurnUsage | None = Field(
        None,
        description="each turn records this model usage (for tests of Run.usage)",
        json_schema_extra=ADVANCED,
    )


class DemoFailure(Exception):
    """The failure `failAtTurn` asks for; not retryable."""


async def play_turn(ctx: RunContext, params: DemoInput, turn: int) -> int | str:
    """One turn, run as a durable step: only when no earlier attempt recorded it. Its recorded
    result is the turn's number, or the text it streamed (`streamChars`): the truth its stream
    previewed, as a model call's step records its reply."""
    await ctx.checkpoint()
    if turn == 1 and params.flaky_attempts and ctx.attempt <= params.flaky_attempts:
        raise RetryableFault(f"flaky fault at turn 1, attempt {ctx.attempt}")
    if params.fail_at_turn == turn:
        raise DemoFailure(f"failing at turn {turn} as asked")
    if params.delay_ms:
        await ctx.delay(params.delay_ms / 1000)
    text = await stream_turn(ctx, params, turn) if params.stream_chars else None
    if params.usage_per_turn is not None:
        ctx.record_usage(
            input_tokens=params.usage_per_turn.input_tokens,
            output_tokens=params.usage_per_turn.output_tokens,
            model="demo",
        )
    await ctx.emit("turn", {"turn": turn})
    return turn if text is None else text


STREAM_CHUNK = 10


def stream_text(turn: int, chars: int) -> str:
    """What turn `turn` writes: a known text, so a reader can check it got every chunk once."""
    pattern = f"turn {turn}: " + "".join(chr(ord("a") + i % 26) for i in range(26)) + ". "
    return (pattern * (chars // len(pattern) + 1))[:chars]


async def stream_turn(ctx: RunContext, params: DemoInput, turn: int) -> str:
    """`streamChars` characters to the stream `answer`, 10 at a time, one per `streamDelayMs`;
    the stream ends with the step (`done`). The text written."""
    text = stream_text(turn, params.stream_chars)
    out = ctx.stream("answer")
    for start in range(0, len(text), STREAM_CHUNK):
        if start and params.stream_delay_ms:
            await ctx.delay(params.stream_delay_ms / 1000)
        out.write(text[start : start + STREAM_CHUNK])
    return text


async def run(ctx: RunContext, params: DemoInput) -> dict[str, Any]:
    per_turn = params.usage_per_turn  # a model call's worth: reserved against budgets first
    expected = (
        None
        if per_turn is None
        else Expected(per_turn.input_tokens, per_turn.output_tokens, model="demo")
    )
    for turn in range(1, params.turns + 1):
        await ctx.step("turn", play_turn, ctx, params, turn, reserve=expected)
        if turn == 1 and params.pause_ms:
            await ctx.sleep(params.pause_ms / 1000)
    output: dict[str, Any] = {"turns": params.turns}
    if params.child_index is not None:
        output["childIndex"] = params.child_index
    if params.children:
        inputs = [
            {"turns": params.child_turns, "delayMs": params.delay_ms, "childIndex": i}
            for i in range(params.children)
        ]
        output["childOutputs"] = await ctx.map("demo", inputs, max_parallel=params.max_parallel)
    if params.await_signal is None:
        return output
    payload = await ctx.wait_for(
        params.await_signal, timeout=params.signal_timeout_s, default=_TIMED_OUT
    )
    timed_out = payload is _TIMED_OUT
    return {**output, "signal": None if timed_out else payload, "timedOut": timed_out}


_TIMED_OUT = object()


AGENT = Agent(
    name="demo",
    description="Runs `turns` turns, each sleeping `delayMs` then appending a `turn` event;"
    " `pauseMs` sleeps durably after turn 1, `awaitSignal` waits for a signal after the last.",
    input_model=DemoInput,
    run=run,
)
