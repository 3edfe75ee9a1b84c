"""Agents for the encryption-at-rest tests: a run whose input, signal, child, schedule and
output all carry the note it was given. Loaded with
`OUTLIVE_AGENT_MODULES=tests.governance.sealed_agents:NOTE,tests.governance.sealed_agents:ECHO`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext


class NoteInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    note: str = Field(max_length=200)
    wait: bool = True  # wait for the signal `reply` before it returns
    repeat: int = Field(1, ge=1, le=100_000)  # the output carries the note this many times


async def note(ctx: RunContext, params: NoteInput) -> dict[str, Any]:
    reply = await ctx.wait_for("reply", timeout=600) if params.wait else None
    child = await ctx.call("echo", {"note": params.note})  # its input and output: the note
    yearly = {"note": params.note}  # a schedule's input: the note too
    await ctx.schedules.create(cron="0 0 1 1 *", agent="echo", input=yearly, name="yearly")
    return {"note": " ".join([params.note] * params.repeat), "reply": reply, "child": child}


async def echo(ctx: RunContext, params: NoteInput) -> dict[str, Any]:
    return {"echo": params.note}


NOTE = Agent(
    name="note", description="Carries its note everywhere.", input_model=NoteInput, run=note
)
ECHO = Agent(name="echo", description="Gives its note back.", input_model=NoteInput, run=echo)
