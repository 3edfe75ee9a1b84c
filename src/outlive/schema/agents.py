"""`Agent`: what can be started, with the JSON Schema of its input."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON

from outlive.agents.registry import Agent as AgentDef
from outlive.schema.runs import RunConflict
from outlive.schema.scalars import as_json


@strawberry.type
class Agent:
    name: str
    description: str
    input_schema: JSON = strawberry.field(description="JSON Schema of the agent's input")
    keyed: bool = strawberry.field(
        default=False,
        description="The agent derives the key of a run started without one from its input "
        '(else: "").',
    )
    on_conflict: RunConflict = strawberry.field(  # type: ignore[valid-type]
        default=RunConflict.RETURN_EXISTING,
        description="What a start without `onConflict` does when its key has an active run.",
    )
    paused: bool = strawberry.field(
        default=False, description="pauseAgent holds its runs in this tenant, and new ones."
    )

    @classmethod
    def of(cls, agent: AgentDef[Any], *, paused: bool = False) -> Agent:
        return cls(
            name=agent.name,
            description=agent.description,
            input_schema=as_json(agent.input_schema),
            keyed=agent.key is not None,
            on_conflict=agent.on_conflict or RunConflict.RETURN_EXISTING,
            paused=paused,
        )
