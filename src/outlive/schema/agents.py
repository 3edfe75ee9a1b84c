"""`Agent`: what can be started, with the JSON Schema of its input."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON

from outlive.agents.registry import Agent as AgentDef
from outlive.schema.scalars import as_json


@strawberry.type
class Agent:
    name: str
    description: str
    input_schema: JSON = strawberry.field(description="JSON Schema of the agent's input")

    @classmethod
    def of(cls, agent: AgentDef[Any]) -> Agent:
        return cls(
            name=agent.name, description=agent.description, input_schema=as_json(agent.input_schema)
        )
