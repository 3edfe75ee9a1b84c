"""An agent for the child-run tests (`tests/workflows/test_children.py`): each `mode` is one way
of starting and awaiting children. Loaded with
`OUTLIVE_AGENT_MODULES=tests.children_agents:AGENTS`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext
from outlive.errors import ChildFailed, RetryableFault


class FamilyInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    mode: str
    depth: int = Field(0, ge=0, le=20)
    turns: int = Field(20, ge=1, le=1000)
    delay_ms: int = Field(250, ge=0, le=10_000)
    fanout: int = Field(2, ge=1, le=100)


def leaf(turns: int = 1, delay_ms: int = 0) -> dict[str, Any]:
    return {"turns": turns, "delayMs": delay_ms}


async def run(ctx: RunContext, p: FamilyInput) -> dict[str, Any]:
    if p.mode == "fail":
        raise ValueError("failing as asked")
    if p.mode == "ok":
        return {"ok": True}
    if p.mode == "call-failing":
        await ctx.call("family", {"mode": "fail"})
        return {}
    if p.mode == "map-tolerant":
        modes = ["ok", "fail", "ok"]
        outs = await ctx.map("family", [{"mode": m} for m in modes], return_exceptions=True)
        return {"outcomes": ["failed" if isinstance(o, ChildFailed) else "ok" for o in outs]}
    if p.mode == "spawn-then-flaky":
        handle = await ctx.spawn("demo", leaf())
        if ctx.attempt == 1:
            raise RetryableFault("flaky after the spawn")
        return {"child": str(handle.id), "childOutput": await handle.result()}
    if p.mode == "calls-in-turn":
        return {"children": [await ctx.call("demo", leaf()) for _ in range(3)]}
    if p.mode == "slow-children":
        await ctx.map("demo", [leaf(p.turns, p.delay_ms)] * 2, max_parallel=2)
        return {}
    if p.mode == "grandchildren":
        await ctx.map("family", [{"mode": "slow-children"}] * 2, max_parallel=2)
        return {}
    if p.mode == "nest":
        if p.depth:
            await ctx.call("family", {"mode": "nest", "depth": p.depth - 1})
        return {}
    if p.mode == "spawn-and-wait":
        await ctx.spawn("demo", leaf(3, 300), abandon=True)
        await ctx.wait_for("go")
        return {}
    if p.mode == "spawn-then-linger":  # attempt k starts child k, then holds its worker a while
        handles = []
        for i in range(p.turns):
            handles.append(await ctx.spawn("demo", leaf()))
            await ctx.delay(p.delay_ms / 1000 if ctx.attempt <= i + 1 else 0)
        return {"children": [await h.result() for h in handles]}
    if p.mode == "tree":  # `fanout` children a level, `depth` levels; the leaves wait, live
        if p.depth:
            inputs = [{"mode": "tree", "depth": p.depth - 1, "fanout": p.fanout}] * p.fanout
            await ctx.map("family", inputs, max_parallel=p.fanout)
        else:
            await ctx.wait_for("never")
        return {}
    raise ValueError(f"unknown mode {p.mode!r}")


AGENTS = [
    Agent(
        name="family",
        description="Starts and awaits child runs, one way per mode.",
        input_model=FamilyInput,
        run=run,
    )
]
