"""A customer-support agent written with pydantic-ai, run durably by Outlive.

Two tools: `lookup_order` reads an order from the shop's API, and `refund` (which needs a
person's approval) asks that API for a refund. Outlive makes each model request and each tool
call a durable step: a worker that dies mid-conversation costs no second refund and no second
model call for a reply already received. `refund` parks the run WAITING until someone sends the
signal `approval` (`{"approved": true}`, or `{"approved": false, "reason": "..."}`), bound to the
call it decides: `waitId` is `call-<tool_call_id>`, and `Run.waitingShow` shows the refund's
arguments. An approval without it is refused.

Install it as an agent with an entry point in your package's pyproject.toml:

    [project.entry-points."outlive.agents"]
    support = "examples.support:AGENT"

(or, without packaging, `OUTLIVE_AGENT_MODULES=support=examples.support:AGENT`). The model is the
deployment's OpenAI-compatible endpoint (`OUTLIVE_LLM_BASE_URL`); the shop's API is
`SUPPORT_SHOP_URL`.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, Field
from pydantic_ai import Agent, RunContext

from outlive.agents.pydantic_ai import durable, openai_compatible
from outlive.agents.registry import RunContext as OutliveContext


class SupportInput(BaseModel):
    message: str = Field(min_length=1, max_length=4000, description="the customer's message")


@dataclass
class Shop:
    """The agent's deps: the shop's API, through the run's HTTP client."""

    http: httpx.AsyncClient
    url: str


support = Agent(
    deps_type=Shop,
    instructions=(
        "You are a support agent for a small shop. Look orders up before you answer about"
        " them. Offer a refund only for an order you looked up."
    ),
    name="support",
)


@support.tool
async def lookup_order(ctx: RunContext[Shop], order_id: str) -> dict[str, Any]:
    """The order with this id: its items, total and status."""
    response = await ctx.deps.http.get(f"{ctx.deps.url}/orders/{order_id}")
    response.raise_for_status()
    order: dict[str, Any] = response.json()
    return order


@support.tool(requires_approval=True)
async def refund(ctx: RunContext[Shop], order_id: str, amount: float) -> dict[str, Any]:
    """Refund `amount` of the order (a person approves it first)."""
    response = await ctx.deps.http.post(
        f"{ctx.deps.url}/refunds", json={"orderId": order_id, "amount": amount}
    )
    response.raise_for_status()
    done: dict[str, Any] = response.json()
    return done


def shop(ctx: OutliveContext, params: SupportInput) -> Shop:
    return Shop(http=ctx.http, url=os.environ.get("SUPPORT_SHOP_URL", "http://127.0.0.1:8001"))


AGENT = durable(
    support,
    name="support",
    description="A pydantic-ai support agent: looks orders up, refunds after an approval.",
    input_model=SupportInput,
    prompt=lambda p: p.message,
    deps=shop,
    model=openai_compatible,
)
