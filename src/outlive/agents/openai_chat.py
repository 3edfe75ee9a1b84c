"""The deployment's OpenAI-compatible endpoint as a pydantic-ai model: `openai_compatible(ctx)`.

The model is pydantic-ai's `OpenAIChatModel` on an `AsyncOpenAI` client that Outlive makes:

- the endpoint is `OUTLIVE_LLM_BASE_URL` (`OUTLIVE_LLM_API_KEY`, `OUTLIVE_LLM_MODEL`), reached
  through the run's HTTP client (`ctx.http`, metered);
- the SDK's own retries are off (`max_retries=0`): a model call is retried by its step's policy
  (`outlive.agents.pydantic_ai`), which honours `Retry-After` and which a cancel interrupts;
- each HTTP call's timeout is `OUTLIVE_LLM_TIMEOUT_S`;
- `OPENAI_API_KEY` from the environment is never sent: without `OUTLIVE_LLM_API_KEY` the SDK,
  which always sends a key, sends the placeholder `api-key-not-set` (as pydantic-ai's providers
  do for a local server).

It is as lenient as Outlive's own client was with OpenAI-compatible servers that differ from
OpenAI, through `OpenAIChatModel`'s documented hooks:

- a completion without `id`, `object` or `model`, or with an empty `finish_reason`, is read (as
  pydantic-ai's GitHub Copilot model does; the model is then the one asked for, the finish
  reason "stop");
- an endpoint that answers a streamed request with one whole JSON completion (it does not
  stream) is read as that completion, its text given as one delta.
"""

from __future__ import annotations

import json
from typing import Any

from openai import AsyncOpenAI, AsyncStream
from openai.types import chat
from openai.types.chat import ChatCompletionChunk
from pydantic_ai.exceptions import UnexpectedModelBehavior
from pydantic_ai.models import CompletedStreamedResponse, Model, ModelRequestParameters
from pydantic_ai.models.openai import OpenAIChatModel, OpenAIChatModelSettings
from pydantic_ai.providers.openai_compatible import OpenAICompatibleProvider

from outlive.agents.registry import RunContext

PROVIDER = "outlive"  # the provider's name in pydantic-ai's messages and telemetry
NO_KEY = "api-key-not-set"  # sent without OUTLIVE_LLM_API_KEY, as pydantic-ai's providers do


class ModelNotConfigured(Exception):
    """No model endpoint is configured (`OUTLIVE_LLM_BASE_URL`)."""


class ChatModel(OpenAIChatModel):
    """`OpenAIChatModel`, lenient where OpenAI-compatible servers leave OpenAI's shape."""

    def _validate_completion(self, response: chat.ChatCompletion) -> Any:
        if not response.id:
            response.id = ""
        response.object = "chat.completion"
        if not response.model:
            response.model = self.model_name
        for index, choice in enumerate(response.choices or []):
            if choice.index is None:
                choice.index = index
            if not choice.finish_reason:  # "" (None is pydantic-ai's own case)
                choice.finish_reason = self._missing_finish_reason(choice)
        return super()._validate_completion(response)

    async def _process_streamed_response(  # an events stream, or a completed one
        self,
        response: AsyncStream[ChatCompletionChunk],
        model_request_parameters: ModelRequestParameters,
        model_settings: OpenAIChatModelSettings | None = None,
    ) -> Any:
        content_type = str(response.response.headers.get("content-type", ""))
        if content_type.startswith("text/event-stream"):
            return await super()._process_streamed_response(
                response, model_request_parameters, model_settings
            )
        body = await response.response.aread()  # an endpoint that does not stream
        try:
            completion = chat.ChatCompletion.construct(**json.loads(body))
        except (ValueError, TypeError) as exc:
            raise UnexpectedModelBehavior(
                "the endpoint answered a streamed request with neither events nor a completion"
            ) from exc
        return CompletedStreamedResponse(
            self._process_response(completion),
            model_request_parameters=model_request_parameters,
            replay_events=True,
        )


def openai_compatible(ctx: RunContext, model: str | None = None) -> Model:
    """A chat model on the deployment's OpenAI-compatible endpoint: `model`, or else
    `OUTLIVE_LLM_MODEL`. Pass it as `durable(..., model=openai_compatible)`."""
    settings = ctx.settings
    if not settings.llm_base_url:
        raise ModelNotConfigured("this agent needs OUTLIVE_LLM_BASE_URL")
    key = settings.llm_api_key.get_secret_value() if settings.llm_api_key else None
    client = AsyncOpenAI(
        base_url=settings.llm_base_url,
        api_key=key or NO_KEY,  # the SDK sends one; never OPENAI_API_KEY from the environment
        http_client=ctx.http,  # type: ignore[arg-type]  # the SDK takes httpx's client at run time
        max_retries=0,
        timeout=settings.llm_timeout_s,
    )
    provider = OpenAICompatibleProvider(PROVIDER, openai_client=client)
    return ChatModel(model or settings.llm_model, provider=provider)
