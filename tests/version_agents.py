"""The agents of the tests of code versions and `outlive replay` (issue 43): `pipeline`, a
multi-step agent, as deployed first (`V1`) and after each of six labelled code edits, each a
version of its own (declared, so a test can tell them apart). Loaded in-process, or through
`OUTLIVE_AGENT_MODULES=tests.version_agents:V1` (or `:RENAMED`, `:PATCHED`, ...).

`pipeline`: `fetch` (the reply a run buys: counted in `BOUGHT`), `plan`, `items` times `item`, then
optionally a wait for the signal `go`, then `write`."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext

BOUGHT: Counter[str] = Counter()  # executions of each step's function, in this process


class PipelineInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    items: int = Field(2, ge=0, le=1000)
    wait: bool = False


class Plan(BaseModel):
    pages: int
    title: str


async def fetch(items: int) -> dict[str, Any]:
    BOUGHT["fetch"] += 1
    return {"pages": items + 1}


async def fetch_count(items: int) -> int:  # the return-type edit: a dict became an int
    BOUGHT["fetch"] += 1
    return items + 1


async def plan(fetched: dict[str, Any]) -> Plan:
    BOUGHT["plan"] += 1
    return Plan(pages=fetched["pages"], title="report")


async def item(i: int) -> int:
    BOUGHT["item"] += 1
    return i * i


async def check(p: Plan) -> bool:
    BOUGHT["check"] += 1
    return p.pages > 0


async def write(p: Plan) -> str:
    BOUGHT["write"] += 1
    return f"wrote {p.pages} pages of {p.title}"


async def _items(ctx: RunContext, params: PipelineInput) -> list[int]:
    return [await ctx.step("item", item, i) for i in range(params.items)]


async def _end(ctx: RunContext, params: PipelineInput, p: Plan, squares: list[int]) -> Any:
    if params.wait:
        await ctx.wait_for("go")
    return {"wrote": await ctx.step("write", write, p), "squares": squares}


async def v1(ctx: RunContext, params: PipelineInput) -> Any:
    fetched = await ctx.step("fetch", fetch, params.items)
    p = await ctx.step("plan", plan, fetched)
    return await _end(ctx, params, p, await _items(ctx, params))


async def added(ctx: RunContext, params: PipelineInput) -> Any:  # a step added after `plan`
    fetched = await ctx.step("fetch", fetch, params.items)
    p = await ctx.step("plan", plan, fetched)
    await ctx.step("check", check, p)
    return await _end(ctx, params, p, await _items(ctx, params))


async def deleted(ctx: RunContext, params: PipelineInput) -> Any:  # `plan` deleted
    fetched = await ctx.step("fetch", fetch, params.items)
    p = Plan(pages=fetched["pages"], title="report")
    return await _end(ctx, params, p, await _items(ctx, params))


async def renamed(ctx: RunContext, params: PipelineInput) -> Any:  # `fetch` renamed `load`
    fetched = await ctx.step("load", fetch, params.items)
    p = await ctx.step("plan", plan, fetched)
    return await _end(ctx, params, p, await _items(ctx, params))


async def reordered(ctx: RunContext, params: PipelineInput) -> Any:  # the items before `plan`
    fetched = await ctx.step("fetch", fetch, params.items)
    squares = await _items(ctx, params)
    p = await ctx.step("plan", plan, fetched)
    return await _end(ctx, params, p, squares)


async def retyped(ctx: RunContext, params: PipelineInput) -> Any:  # `fetch` returns an int now
    pages = await ctx.step("fetch", fetch_count, params.items)
    p = await ctx.step("plan", plan, {"pages": pages})
    return await _end(ctx, params, p, await _items(ctx, params))


async def patched(ctx: RunContext, params: PipelineInput) -> Any:  # the rename, behind a patch
    if await ctx.patched("load"):
        fetched = await ctx.step("load", fetch, params.items)
    else:
        fetched = await ctx.step("fetch", fetch, params.items)
    p = await ctx.step("plan", plan, fetched)
    return await _end(ctx, params, p, await _items(ctx, params))


async def leaky(ctx: RunContext, params: PipelineInput) -> Any:  # the network outside a step
    async with httpx.AsyncClient() as client:
        await client.get(os.environ.get("OUTLIVE_TEST_LEAK_URL", "http://127.0.0.1:9/"))
    return await v1(ctx, params)


def pipeline(run: Any, version: str) -> Agent[PipelineInput]:
    return Agent(
        name="pipeline",
        description="fetch, plan, items, an optional wait for `go`, write",
        input_model=PipelineInput,
        run=run,
        version=version,
    )


V1 = pipeline(v1, "v1")
ADDED = pipeline(added, "added")
DELETED = pipeline(deleted, "deleted")
RENAMED = pipeline(renamed, "renamed")
REORDERED = pipeline(reordered, "reordered")
RETYPED = pipeline(retyped, "retyped")
PATCHED = pipeline(patched, "patched")
LEAKY = pipeline(leaky, "leaky")
