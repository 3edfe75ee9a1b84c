"""Agents for the harness's tests: one that sleeps 30 days and then waits for an approval, one
that waits for a reply, one that a schedule starts."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from outlive.agents.registry import Agent, RunContext

THIRTY_DAYS_S = 30 * 24 * 3600


class ReviewInput(BaseModel):
    doc: str


async def _review(ctx: RunContext, params: ReviewInput) -> Any:
    draft = await ctx.step("draft", lambda: f"draft of {params.doc}")
    await ctx.sleep(THIRTY_DAYS_S)  # the cooling-off period
    checked = await ctx.step("recheck", lambda: f"{draft}, rechecked")
    answer = await ctx.wait_for("approval", wait_id="publish", show={"draft": checked})
    if not answer.get("approved"):
        return {"published": False}
    return {"published": True, "text": await ctx.step("publish", lambda: checked.upper())}


REVIEW = Agent(
    name="review",
    description="drafts, cools off for 30 days, asks for an approval, publishes",
    input_model=ReviewInput,
    run=_review,
)


class RemindInput(BaseModel):
    days: int


async def _remind(ctx: RunContext, params: RemindInput) -> Any:
    answer = await ctx.wait_for("reply", timeout=params.days * 24 * 3600)
    return {"answered": answer is not None}


REMIND = Agent(
    name="remind",
    description="waits `days` for a reply, then gives up",
    input_model=RemindInput,
    run=_remind,
)


class TickInput(BaseModel):
    pass


async def _tick(ctx: RunContext, params: TickInput) -> Any:
    return {"ticked": True}


TICK = Agent(
    name="tick",
    description="does nothing, at once: what a schedule starts",
    input_model=TickInput,
    run=_tick,
)
