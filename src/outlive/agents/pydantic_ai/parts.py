"""What a model step shows of its response while it streams (`runOutput`, display only).

Each part goes to the step's stream with a kind (`OutputChunk.kind`): text as it is written
(`text`), the arguments of an output tool (the structured output, `final_result`) as they are
written (`output`), and each other tool call once it is whole, as one JSON line `{"id", "tool",
"args"}` (`tool_call`). A tool step adds its result the same way (`tool_result`,
`toolsets.show_result`). The recorded `ModelResponse` stays the truth.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic_ai.messages import (
    ModelResponse,
    PartDeltaEvent,
    PartEndEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
    ToolCallPartDelta,
)
from pydantic_ai.models import ModelRequestParameters

from outlive.agents.context import OutputStream

TEXT = "text"
OUTPUT = "output"
TOOL_CALL = "tool_call"
TOOL_RESULT = "tool_result"


def json_line(value: Any) -> str:
    """One line of JSON (a `tool_call` or `tool_result` chunk): chunks joined stay one a line."""
    return json.dumps(value, separators=(",", ":"), default=str) + "\n"


def call_args(part: ToolCallPart) -> Any:
    """A tool call's arguments as JSON values, or as the text the model wrote when it is not
    JSON (the run's validation answers that)."""
    try:
        return part.args_as_dict()
    except (ValueError, TypeError):
        return part.args_as_json_str()


class PartStream:
    """Writes one model response's parts to `out` (None: nowhere) as they stream."""

    def __init__(self, out: OutputStream | None, parameters: ModelRequestParameters) -> None:
        self.out = out
        self.outputs = {tool.name for tool in parameters.output_tools}
        self.kinds: dict[int, str] = {}  # by part index
        self.shown: set[str] = set()  # the tool calls written so far, by id

    def see(self, event: Any) -> None:
        if self.out is None:
            return
        if isinstance(event, PartStartEvent):
            self._start(event.index, event.part)
        elif isinstance(event, PartDeltaEvent):
            kind, delta = self.kinds.get(event.index), event.delta
            if kind == TEXT and isinstance(delta, TextPartDelta):
                self.out.write(delta.content_delta)
            elif kind == OUTPUT and isinstance(delta, ToolCallPartDelta):
                self._output(delta.args_delta)
        elif isinstance(event, PartEndEvent) and self.kinds.get(event.index) == TOOL_CALL:
            self._ended(event.part)

    def _ended(self, part: Any) -> None:
        if isinstance(part, ToolCallPart):
            self._call(part)

    def _output(self, delta: Any) -> None:
        if isinstance(delta, str) and self.out is not None:
            self.out.write(delta, kind=OUTPUT)

    def _start(self, index: int, part: Any) -> None:
        assert self.out is not None  # noqa: S101 (checked by `see`)
        if isinstance(part, TextPart):
            self.kinds[index] = TEXT
            self.out.write(part.content)
        elif isinstance(part, ToolCallPart):
            kind = OUTPUT if part.tool_name in self.outputs else TOOL_CALL
            self.kinds[index] = kind
            if kind == OUTPUT and part.args:
                args = part.args if isinstance(part.args, str) else json.dumps(part.args)
                self.out.write(args, kind=OUTPUT)

    def finish(self, response: ModelResponse) -> None:
        """The tool calls no `PartEndEvent` showed (a response read whole)."""
        if self.out is None:
            return
        for part in response.parts:
            if isinstance(part, ToolCallPart) and part.tool_name not in self.outputs:
                self._call(part)

    def _call(self, part: ToolCallPart) -> None:
        assert self.out is not None  # noqa: S101 (checked by the callers)
        if part.tool_call_id in self.shown:
            return
        self.shown.add(part.tool_call_id)
        line = {"id": part.tool_call_id, "tool": part.tool_name, "args": call_args(part)}
        self.out.write(json_line(line), kind=TOOL_CALL)
