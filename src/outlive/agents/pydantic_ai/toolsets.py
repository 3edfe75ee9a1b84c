"""The tool side of `durable()`: every tool call is a durable step that records its outcome.

- **An outcome, whatever it was.** A tool call's step (`tool.<name>`) records what the call came
  to: its result, or the `ModelRetry`, `CallDeferred`, `ApprovalRequired`, `ToolFailed` or
  pydantic `ValidationError` it raised, as data (pydantic-ai's own `CallToolResult`, the shape its
  Temporal and DBOS integrations record). A replay returns the same outcome, raising it again
  where it was raised, without running the tool: the model is sent the history that happened,
  and a side effect made before a `ModelRetry` is not made twice (round five, F3). A step
  recorded before outcomes were (a tool's plain JSON result) reads as that result.
- **Its arguments' validator too.** A tool's own `args_validator` is a step of its own
  (`tool.<name>.validate`), its outcome recorded the same way.
- **A policy per tool.** `ToolPolicy(timeout=, retry=)`: each call of the tool's body is bounded
  by `timeout` and retried inside the attempt by `retry` (`outlive.agents.policy.Retry`) for
  what a retry can fix (a `RetryableFault`, a timeout, a transport error, a 429 or 5xx); once the
  policy is spent, the run's own retry takes it.
- **Shown as it happens.** A call's outcome goes to the run's stream (`answer`, kind
  `tool_result`, one JSON line) and the `tool` event says which outcome it was.
- **Listings as steps.** A toolset whose listing is I/O (an MCP server: any leaf that is not a
  function or external toolset) gets `DurableListedToolset`: its listing is a step too (`tools.
  <id>`, once per model turn), and it is entered (connected) only when one of its steps needs
  it, so a replay neither lists nor connects.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

from pydantic import TypeAdapter, ValidationError
from pydantic_ai.durable_exec._toolset import (
    CallToolResult,
    unwrap_tool_call_result,
    wrap_tool_call_result,
)
from pydantic_ai.tools import RunContext as ToolContext
from pydantic_ai.tools import ToolDefinition
from pydantic_ai.toolsets import AbstractToolset, FunctionToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool
from pydantic_ai.toolsets.external import TOOL_SCHEMA_VALIDATOR, ExternalToolset

from outlive.agents.policy import Retry
from outlive.agents.pydantic_ai.parts import TOOL_RESULT, json_line
from outlive.agents.registry import RunContext
from outlive.telemetry import genai

_OUTCOME: TypeAdapter[Any] = TypeAdapter(CallToolResult)
_TOOL_DEF: TypeAdapter[ToolDefinition] = TypeAdapter(ToolDefinition)
MAX_SHOWN_BYTES = 8 * 1024  # a result shown in the stream; a bigger one is left out of it
RETURNED = ("tool_return", "tool_content_result")


@dataclass(frozen=True)
class ToolPolicy:
    """A tool's step policy: each call of its body bounded by `timeout` (seconds) and retried
    inside the attempt by `retry`."""

    timeout: float | None = None
    retry: Retry | None = None


def outcome_of(recorded: Any) -> Any:
    """What a tool step recorded, as the call came to: its result returned, or what it raised
    raised again. A step recorded before outcomes were data is the tool's plain result."""
    try:
        outcome = _OUTCOME.validate_python(recorded)
    except ValidationError:
        return recorded
    return unwrap_tool_call_result(outcome)


async def record_outcome(call: Any) -> dict[str, Any]:
    """Await `call` (a tool's body) and its outcome as JSON: returned, or what it raised."""
    dumped: dict[str, Any] = _OUTCOME.dump_python(await wrap_tool_call_result(call), mode="json")
    return dumped


def outcome_name(dumped: Mapping[str, Any]) -> str:
    kind = str(dumped.get("kind"))
    return "return" if kind in RETURNED else kind


class DurableToolset(WrapperToolset[Any]):
    """A toolset whose every call is a durable step of the run (`tool.<name>`)."""

    def __init__(
        self,
        wrapped: AbstractToolset[Any],
        run: RunContext,
        *,
        policies: Mapping[str, ToolPolicy] | None = None,
        default: ToolPolicy | None = None,
        stream: str | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.run = run
        self.policies = dict(policies or {})
        self.default = default or ToolPolicy()
        self.stream_name = stream

    def visit_and_replace(
        self, visitor: Callable[[AbstractToolset[Any]], AbstractToolset[Any]]
    ) -> AbstractToolset[Any]:
        return visitor(self)  # a leaf of its own: what it wraps is not wrapped again

    async def get_tools(self, ctx: ToolContext[Any]) -> dict[str, ToolsetTool[Any]]:
        tools = await self.wrapped.get_tools(ctx)
        return {
            name: self._validated(name, tool) if tool.args_validator_func else tool
            for name, tool in tools.items()
        }

    def _validated(self, name: str, tool: ToolsetTool[Any]) -> ToolsetTool[Any]:
        """The tool with its `args_validator` run as a step (`tool.<name>.validate`)."""
        validator = tool.args_validator_func
        assert validator is not None  # noqa: S101 (checked by the caller)

        async def validate(ctx: ToolContext[Any], **args: Any) -> None:
            async def check() -> Any:
                async def run() -> None:
                    result = validator(ctx, **args)
                    if inspect.isawaitable(result):
                        await result

                return await record_outcome(run())

            outcome_of(await self.run.step(f"tool.{name}.validate", check))

        return replace(tool, args_validator_func=validate)

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: ToolContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        policy = self.policies.get(name, self.default)

        async def call() -> Any:
            dumped = await record_outcome(self._call(name, tool_args, ctx, tool))
            outcome = outcome_name(dumped)
            await self.run.emit("tool", {"tool": name, "id": ctx.tool_call_id, "outcome": outcome})
            self._show(name, ctx.tool_call_id, outcome, dumped)
            return dumped

        with genai.tool(name, ctx.tool_call_id):  # its span: `execute_tool`
            recorded = await self.run.step(
                f"tool.{name}", call, retry=policy.retry, timeout=policy.timeout
            )
        return outcome_of(recorded)

    async def _call(
        self, name: str, tool_args: dict[str, Any], ctx: ToolContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        return await self.wrapped.call_tool(name, tool_args, ctx, tool)

    def _show(self, name: str, call_id: str | None, outcome: str, dumped: Any) -> None:
        """The outcome as one `tool_result` line of the stream (inside the step: once)."""
        if self.stream_name is None:
            return
        line = {"id": call_id, "tool": name, "outcome": outcome}
        content = {k: v for k, v in dumped.items() if k not in ("kind", "content_file_digests")}
        text = json_line({**line, **content})
        if len(text.encode()) > MAX_SHOWN_BYTES:
            text = json_line({**line, "truncated": True})
        self.run.stream(self.stream_name).write(text, kind=TOOL_RESULT)


class DurableListedToolset(DurableToolset):
    """A toolset whose listing is I/O (an MCP server): listed in a step (`tools.<id>`), and
    entered only when one of its steps needs it (exited with the run)."""

    def __init__(self, wrapped: AbstractToolset[Any], run: RunContext, **options: Any) -> None:
        super().__init__(wrapped, run, **options)
        self._entered = False
        self._lock = asyncio.Lock()

    async def __aenter__(self) -> DurableListedToolset:
        return self  # not connected until a step needs it: a replay makes no connection

    async def __aexit__(self, *args: Any) -> bool | None:
        if not self._entered:
            return None
        self._entered = False
        return await self.wrapped.__aexit__(*args)

    async def _enter(self) -> None:
        async with self._lock:
            if not self._entered:
                await self.wrapped.__aenter__()
                self._entered = True

    async def get_tools(self, ctx: ToolContext[Any]) -> dict[str, ToolsetTool[Any]]:
        async def listing() -> dict[str, Any]:
            await self._enter()
            tools = await self.wrapped.get_tools(ctx)
            return {
                name: {
                    "def": _TOOL_DEF.dump_python(t.tool_def, mode="json"),
                    "retries": t.max_retries,
                }
                for name, t in tools.items()
            }

        listed = await self.run.step(
            f"tools.{self.wrapped.id or type(self.wrapped).__name__}", listing
        )
        return {
            name: ToolsetTool(
                toolset=self,
                tool_def=_TOOL_DEF.validate_python(found["def"]),
                max_retries=found["retries"],
                args_validator=TOOL_SCHEMA_VALIDATOR,
            )
            for name, found in listed.items()
        }

    async def _call(
        self, name: str, tool_args: dict[str, Any], ctx: ToolContext[Any], tool: ToolsetTool[Any]
    ) -> Any:
        await self._enter()
        own = await self.wrapped.get_tool_for_tool_def(tool.tool_def, ctx)
        return await self.wrapped.call_tool(name, tool_args, ctx, own)


def durable_toolsets(
    toolsets: list[AbstractToolset[Any]], run: RunContext, **options: Any
) -> list[AbstractToolset[Any]]:
    """The agent's toolsets with each leaf wrapped: function and external toolsets (listed in
    the process) in `DurableToolset`, any other (an MCP server) in `DurableListedToolset`."""

    def wrap(leaf: AbstractToolset[Any]) -> AbstractToolset[Any]:
        if isinstance(leaf, DurableToolset):
            return leaf
        if isinstance(leaf, FunctionToolset | ExternalToolset):
            return DurableToolset(leaf, run, **options)
        return DurableListedToolset(leaf, run, **options)

    return [toolset.visit_and_replace(wrap) for toolset in toolsets]
