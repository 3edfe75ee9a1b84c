"""A pydantic-ai agent for the crash tests of issue 40, run by real `outlive worker` processes
against a scripted OpenAI-compatible stub (`tests.agents.script_stub`). Loaded with
`OUTLIVE_AGENT_MODULES=tests.replay_agents:AGENT`.

Its tools are the outcomes a tool call can have: `note` returns, `flaky` raises `ModelRetry` on
its first call, `strict` raises a `ValidationError` on its first call, `external` defers its call
(answered by the signal `tool_result`), `refund` needs an approval. Every tool body appends a
line to the ledger file `REPLAY_LEDGER` (so a test counts executions across killed processes),
and the event stream handler appends each event it sees to `REPLAY_EVENTS`."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.exceptions import CallDeferred, ModelRetry
from pydantic_ai.tools import RunContext

from outlive.agents.pydantic_ai import durable, openai_compatible


class Ask(BaseModel):
    message: str


class Strict(BaseModel):
    n: int


def _append(variable: str, line: str) -> int:
    """Append `line` to the file `variable` names; how many such lines it holds now."""
    path = Path(os.environ[variable])
    with path.open("a") as file:
        file.write(line + "\n")
    return path.read_text().splitlines().count(line)


agent: PydanticAgent[None, str] = PydanticAgent(name="replay", instructions="Use the tools.")


@agent.tool_plain
def note(n: int) -> str:
    _append("REPLAY_LEDGER", f"note {n}")
    return f"noted {n}"


@agent.tool_plain
def flaky(n: int) -> str:
    if _append("REPLAY_LEDGER", f"flaky {n}") == 1:
        raise ModelRetry(f"try again with {n}")
    return f"flaky ok {n}"


@agent.tool_plain
def strict(n: int) -> str:
    if _append("REPLAY_LEDGER", f"strict {n}") == 1:
        Strict.model_validate({"n": "not a number"})
    return f"strict ok {n}"


@agent.tool_plain
def external(n: int) -> str:
    _append("REPLAY_LEDGER", f"external {n}")
    raise CallDeferred(metadata={"n": n})


@agent.tool_plain(requires_approval=True)
def refund(order_id: str, amount: float) -> str:
    _append("REPLAY_LEDGER", f"refund {order_id} {amount:.2f}")
    return f"refunded {amount:.2f} for {order_id}"


async def handler(ctx: RunContext[Any], events: Any) -> None:
    async for event in events:
        call_id = getattr(event, "tool_call_id", None) or ""
        _append("REPLAY_EVENTS", f"{event.event_kind}:{call_id}")


AGENT = durable(
    agent,
    name="replay",
    input_model=Ask,
    prompt=lambda p: p.message,
    model=openai_compatible,
    event_stream_handler=handler,
)
