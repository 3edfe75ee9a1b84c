"""The `llm` agent (contract §6): a pydantic-ai agent on the deployment's OpenAI-compatible
endpoint, run durably by `outlive.agents.pydantic_ai`.

`CHAT` is a plain `pydantic_ai.Agent` (text output, no tools). Its model is
`openai_compatible(ctx, model)` (pydantic-ai's `OpenAIChatModel` over `OUTLIVE_LLM_BASE_URL`, the
openai SDK's own retries off) wrapped in a `DurableModel`, so each model call is a durable step
named `reply` with the model-call policy every pydantic-ai agent on Outlive gets: retried inside
the attempt (429, 5xx, transport errors and timeouts; up to 5 calls; `Retry-After` honoured, else
a backoff from `OUTLIVE_LLM_RETRY_BACKOFF_S` doubling to 60 s), the named limit `llm` taken
first, its usage recorded and spent against the token rates, a cancel interrupting it. Each
reply is a `message` event written with its step: an attempt after a crash mid-conversation gets
the earlier replies back from the journal instead of paying for them again. A 4xx fails the run
at once (`LlmRejected`), naming the status and never the endpoint's body.

A reply cut off by the length limit (`finish_reason` "length") is continued ("Continue.", the
conversation so far as the message history), up to `maxTurns` replies, and the output's `reply`
is the whole answer, the replies joined. `system` is the run's instructions (a system message
before the conversation). With `stream` (the default) the endpoint is asked for server-sent
events with usage, and each text delta goes to the run's stream `answer` as it arrives (a stream
per reply, ended with its step); the step records the whole reply.

This module is the agent's definition only (its input, its model choice): every process that
registers agents imports it, the API too, and it imports neither pydantic-ai nor the openai SDK.
The conversation itself is `outlive.agents.llm_chat`, named in the agent's `warm`: a worker
imports it in a thread as soon as it is up (`AgentRegistry.warm_up`), and a run that comes
before that import has finished awaits it (`imported`), without holding the event loop (an
import of pydantic-ai and the SDK on the loop would hold it, heartbeats included, for seconds).
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext, imported
from outlive.config import Settings

__all__ = ["AGENT", "LlmInput", "LlmNotConfigured"]

CHAT_MODULE = "outlive.agents.llm_chat"  # the conversation: pydantic-ai and the openai SDK


class LlmInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=20_000)
    max_turns: int = Field(1, ge=1, le=20, description="most model replies to ask for")
    system: str | None = Field(None, max_length=20_000, description="a system prompt")
    model: str | None = Field(
        None, min_length=1, max_length=200, description="one of OUTLIVE_LLM_MODELS"
    )
    stream: bool = Field(True, description="the reply's tokens go to the stream `answer`")

    @field_validator("model")
    @classmethod
    def _allowed(cls, model: str | None, info: ValidationInfo) -> str | None:
        """At `startRun` (settings in the context: `Agent.validate`), a model outside
        `OUTLIVE_LLM_MODELS` is refused before any row is written (contract §6, round five)."""
        settings = (info.context or {}).get("settings")
        if model is not None and isinstance(settings, Settings):
            try:
                choose_model(settings, model)
            except LlmNotConfigured:
                allowed = ", ".join(sorted({settings.llm_model, *settings.llm_models}))
                raise ValueError(
                    f"model {model!r} is not allowed here (allowed: {allowed})"
                ) from None
        return model


class LlmNotConfigured(Exception):
    """OUTLIVE_LLM_BASE_URL is not set, or the run asked for a model it does not allow."""


def choose_model(settings: Settings, asked: str | None) -> str:
    """The model to call: `asked` when `OUTLIVE_LLM_MODELS` allows it (or it is the default),
    else `LlmNotConfigured`; the default `OUTLIVE_LLM_MODEL` when none was asked for."""
    if asked is None or asked == settings.llm_model:
        return settings.llm_model
    if asked not in settings.llm_models:
        raise LlmNotConfigured(f"model {asked!r} is not allowed here (OUTLIVE_LLM_MODELS)")
    return asked


async def run(ctx: RunContext, params: LlmInput) -> dict[str, Any]:
    chat = await imported(CHAT_MODULE)  # warmed by the worker at start: at once, then
    result: dict[str, Any] = await chat.run(ctx, params)
    return result


AGENT = Agent(
    name="llm",
    description="Chats with the configured OpenAI-compatible endpoint; each reply is a `message`.",
    input_model=LlmInput,
    run=run,
    warm=(CHAT_MODULE,),
)
