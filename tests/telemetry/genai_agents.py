"""A pydantic-ai agent with one tool, on pydantic-ai's `FunctionModel` (no network): its first
reply calls `lookup`, its second answers. For the GenAI spans' tests."""

from __future__ import annotations

from pydantic import BaseModel
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai.messages import ModelMessage, ModelResponse, TextPart, ToolCallPart, ToolReturnPart
from pydantic_ai.models.function import AgentInfo, FunctionModel

from outlive.agents.pydantic_ai import durable


class Question(BaseModel):
    q: str


def _reply(messages: list[ModelMessage], _: AgentInfo) -> ModelResponse:
    returned = [p for m in messages for p in m.parts if isinstance(p, ToolReturnPart)]
    if not returned:
        return ModelResponse(parts=[ToolCallPart("lookup", {"x": 41}, tool_call_id="call-1")])
    return ModelResponse(parts=[TextPart(f"it is {returned[0].content}")])


BOT: PydanticAgent[None, str] = PydanticAgent(name="toolbot", output_type=str)


@BOT.tool_plain
def lookup(x: int) -> int:
    return x + 1


TOOLBOT = durable(
    BOT,
    name="toolbot",
    input_model=Question,
    prompt=lambda params: params.q,
    model=lambda _ctx: FunctionModel(_reply, model_name="scripted"),
    stream=None,  # FunctionModel answers whole replies
)
