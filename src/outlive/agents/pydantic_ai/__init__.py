"""Any `pydantic_ai.Agent` as an Outlive agent: `durable(agent, name=, input_model=, prompt=)`.

It follows pydantic-ai's durable-execution interface as its Temporal, DBOS and Prefect
integrations do: a wrapper model (`DurableModel`, `models`) and wrapper toolsets
(`DurableToolset`, `toolsets`) put in place with `Agent.override` for the run, so the agent
itself is not changed.

- **Every model request is a durable step** (`model.request`), with the model-call policy, its
  parts streamed to `answer` with their kinds, and the event handler called inside it (`models`).
- **Every tool call is a durable step** (`tool.<name>`) that records its outcome, a result or
  what it raised (`ModelRetry`, `CallDeferred`, …), and returns it on a replay without running the
  tool (`toolsets`); an MCP server's listing is a step too.
- **Events once.** The agent's `event_stream_handler` sees each event once (`events`).
- **Deferred calls wait for a signal bound to the call** (`deferred`): an approval (`approval`,
  `Approval`) or an external result (`tool_result`, `ToolResult`), each by its wait
  `call-<tool_call_id>`, whose `Run.waitingShow` is the tool and its arguments.
- **Per run**: a model from an allow-list, model settings, usage limits, a message history, a
  provider per tenant, a key, a chat that waits for its next message (`runner`).

Replaying a run is deterministic because everything that is not deterministic (the model, the
tools, the approvals) comes from the journal: the agent is run again from the top on each
attempt, and each step returns what it recorded.
"""

from outlive.agents.openai_chat import ModelNotConfigured, openai_compatible
from outlive.agents.pydantic_ai.deferred import APPROVAL, TOOL_RESULT, Approval, ToolResult
from outlive.agents.pydantic_ai.events import DurableEvents
from outlive.agents.pydantic_ai.models import (
    ANSWER,
    LIMIT,
    DurableModel,
    LegacyReply,
    LlmRejected,
    call_retry,
)
from outlive.agents.pydantic_ai.runner import INPUT, Chat, durable
from outlive.agents.pydantic_ai.toolsets import (
    DurableListedToolset,
    DurableToolset,
    ToolPolicy,
)

__all__ = [
    "ANSWER",
    "APPROVAL",
    "INPUT",
    "LIMIT",
    "TOOL_RESULT",
    "Approval",
    "Chat",
    "DurableEvents",
    "DurableListedToolset",
    "DurableModel",
    "DurableToolset",
    "LegacyReply",
    "LlmRejected",
    "ModelNotConfigured",
    "ToolPolicy",
    "ToolResult",
    "call_retry",
    "durable",
    "openai_compatible",
]
