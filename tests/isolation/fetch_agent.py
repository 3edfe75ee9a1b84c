"""An agent that fetches a URL from its input with `ctx.public_http`, as a third-party agent
might (review finding I7). Loaded with `OUTLIVE_AGENT_MODULES=tests.isolation.fetch_agent:AGENT`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict

from outlive.agents.registry import Agent, RunContext


class FetchInput(BaseModel):
    model_config = ConfigDict(extra="forbid")

    url: str


async def run(ctx: RunContext, params: FetchInput) -> dict[str, Any]:
    response = await ctx.public_http.get(params.url)
    return {"status": response.status_code}


AGENT = Agent(
    name="fetcher",
    description="Fetches the URL it is given, through ctx.public_http.",
    input_model=FetchInput,
    run=run,
)
