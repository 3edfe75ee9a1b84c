"""An agent that sets its own reminder (`ctx.schedules.create`), then fails its first attempt
with a retryable fault: the second attempt replays the step and must get the same schedule.
Loaded with `OUTLIVE_AGENT_MODULES=tests.schedules.agents:AGENT`."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext
from outlive.errors import RetryableFault


class ReminderInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    cron: str = "0 8 * * 1-5"
    timezone: str = "Europe/Paris"
    note: str = Field("stand-up", max_length=100)


async def run(ctx: RunContext, params: ReminderInput) -> dict[str, Any]:
    made = await ctx.schedules.create(
        cron=params.cron,
        timezone=params.timezone,
        agent="demo",
        input={"turns": 1, "delayMs": 0},
        name="daily",
    )
    if ctx.attempt == 1:
        raise RetryableFault("the first attempt is lost after its schedule was made")
    return {"schedule": made}


AGENT = Agent(
    name="reminder",
    description="Sets its own reminder with ctx.schedules.create.",
    input_model=ReminderInput,
    run=run,
)
