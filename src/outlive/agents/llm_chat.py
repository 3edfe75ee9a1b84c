"""The `llm` agent's conversation (`outlive.agents.llm` is its definition): a pydantic-ai agent on
the deployment's OpenAI-compatible endpoint, each reply a durable step. Imported by the processes
that run agents (a worker warms it at start), never by the API or the CLI."""

from __future__ import annotations

from typing import Any

from pydantic_ai import Agent as PydanticAgent

from outlive.agents.llm import LlmInput, LlmNotConfigured, choose_model
from outlive.agents.pydantic_ai import ANSWER, DurableModel, openai_compatible
from outlive.agents.registry import RunContext

STEP = "reply"  # each model call's step
CONTINUE = "Continue."  # the prompt that continues a reply cut off by the length limit

# The pydantic-ai agent: text output, no tools, no model of its own (each run gives it its
# durable model, and its system prompt as instructions). An empty reply is an answer (None), as
# it was before: with `str` alone pydantic-ai would ask the model again ("Please return text.").
CHAT: PydanticAgent[None, str | None] = PydanticAgent(name="llm", output_type=[str, type(None)])


async def run(ctx: RunContext, params: LlmInput) -> dict[str, Any]:
    if not ctx.settings.llm_base_url:
        raise LlmNotConfigured("the llm agent needs OUTLIVE_LLM_BASE_URL")
    chosen = choose_model(ctx.settings, params.model)
    stream = ANSWER if params.stream else None
    model = DurableModel(openai_compatible(ctx, chosen), ctx, stream=stream, step=STEP)
    history = None
    replies: list[str] = []
    for _ in range(params.max_turns):
        await ctx.checkpoint()
        result = await CHAT.run(
            CONTINUE if history is not None else params.prompt,
            message_history=history,
            model=model,
            instructions=params.system,
        )
        replies.append(result.output or "")
        if result.response.finish_reason != "length":
            break
        history = result.all_messages()
    return {"reply": "".join(replies), "turns": len(replies)}
