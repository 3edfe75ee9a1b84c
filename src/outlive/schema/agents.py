"""`Agent`: what can be started, with the JSON Schema of its input."""

from __future__ import annotations

from typing import Any

import strawberry
from strawberry.scalars import JSON

from outlive.agents.registry import Agent as AgentDef
from outlive.agents.versions import UNAVAILABLE
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
    available: bool = strawberry.field(
        default=True,
        description="false: its code failed to load in this deployment (its runs wait, "
        "`startRun` refuses it); `loadError` says why.",
    )
    load_error: str | None = strawberry.field(
        default=None, description="Why its code failed to load (null while it is available)."
    )
    code_version: str = strawberry.field(
        default=UNAVAILABLE,
        description="Its code version here: the version it declares, else a hash of its code "
        '("h:…"). Each run records it when it starts (`Run.codeVersion`); "unavailable" while '
        "its code failed to load.",
    )
    signals: JSON = strawberry.field(
        default_factory=dict,
        description="The signals its runs wait for, by name: each one's payload JSON Schema "
        "and whether it must be bound to its wait (`waitId`). {}: any name, any payload.",
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
            code_version=agent.code_version,
            signals=as_json({n: s.schema() for n, s in (agent.signals or {}).items()}),
        )

    @classmethod
    def unavailable(cls, name: str, error: str, *, paused: bool = False) -> Agent:
        """An agent whose code failed to load: its name and why."""
        return cls(
            name=name,
            description="",
            input_schema=as_json({}),
            available=False,
            load_error=error,
            paused=paused,
        )
