"""The model side of `durable()`: every model request is a durable step (`DurableModel`).

- **Recorded.** A request's `ModelResponse` is recorded with its usage (`ctx.record_usage`), and
  a later attempt of the run gets it back without asking the model again.
- **The model-call policy** (contract §6, `call_retry`): a 429, a 5xx, a transport error or a
  timeout (`OUTLIVE_LLM_TIMEOUT_S`) is retried inside the attempt, up to 5 calls, waiting what a
  `Retry-After` says or else a backoff from 1 s (`OUTLIVE_LLM_RETRY_BACKOFF_S`) doubling to 60 s;
  only then is it a retryable fault of the run. Each call takes the named limit `llm` first
  (`outlive.services.limits`) and its usage is spent against that limit's token rates. Any other
  refusal fails the run at once (`LlmRejected`). What the tenant reads of a failure
  (`Run.error`) names the status, never the endpoint's body, which may carry the operator's
  account details (issue 26, L2): that is logged.
- **Streamed.** While the step runs, the response's parts go to the run's stream `answer`
  (`parts.PartStream`: text, structured output deltas, tool calls), and the agent's event stream
  handler, if `durable()` was given one, sees the model's events live, inside the step: a replay
  gives the agent the recorded response and never calls the handler again for it.
- **Drained on a deploy.** The step is `drain=True`: a worker that is stopped (SIGTERM) lets a
  model call in flight finish and be recorded, within `OUTLIVE_SHUTDOWN_STEP_GRACE_S`, before it
  hands the run back, so a rolling deploy buys no reply twice.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict
from pydantic_ai.agent import EventStreamHandler
from pydantic_ai.exceptions import (
    ModelAPIError,
    ModelConnectionError,
    ModelHTTPError,
    ModelTimeoutError,
    UnexpectedModelBehavior,
)
from pydantic_ai.messages import (
    FinishReason,
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelResponse,
    TextPart,
    ToolCallPart,
)
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext as ToolContext
from pydantic_ai.usage import RequestUsage

from outlive.agents.context import ModelCallMark, OutputStream, RunContext
from outlive.agents.openai_chat import PROVIDER
from outlive.agents.policy import Expected, Retry, parse_retry_after
from outlive.agents.pydantic_ai.parts import PartStream, call_args
from outlive.config import Settings
from outlive.errors import RetryableFault, RetryAfter
from outlive.telemetry import genai

log = logging.getLogger(__name__)

ANSWER = "answer"  # the stream the model's text goes to
LIMIT = "llm"  # the named limit each model call takes
CALL_ATTEMPTS = 5
CALL_MAX_BACKOFF_S = 60.0
CALL_STEP_SLACK_S = 5.0  # the step's own deadline: the HTTP timeout and this
BYTES_PER_TOKEN = 4  # a prompt's tokens, estimated from its JSON (reserved before the call)


class LlmRejected(Exception):
    """The model endpoint refused the request in a way a retry cannot fix."""


def call_retry(settings: Settings) -> Retry:
    """The policy of one model call: up to 5 calls, backoff from `OUTLIVE_LLM_RETRY_BACKOFF_S`."""
    return Retry(
        attempts=CALL_ATTEMPTS,
        backoff=settings.llm_retry_backoff_s,
        max_backoff=CALL_MAX_BACKOFF_S,
    )


class LegacyReply(BaseModel):
    """A `reply` step that the `llm` agent recorded before it ran on pydantic-ai (its own
    client recorded the text and the finish reason). A run that was in flight at the upgrade,
    or a failed one retried with `reuseSteps`, gets its replies back from these, unpaid again."""

    model_config = ConfigDict(extra="forbid")

    content: str
    finish_reason: str | None = None

    def response(self, model_name: str) -> ModelResponse:
        finish: FinishReason = "length" if self.finish_reason == "length" else "stop"
        return ModelResponse(
            parts=[TextPart(self.content)], model_name=model_name, finish_reason=finish
        )


class DurableModel(WrapperModel):
    """A model whose every request is a durable step of the run (`step`, by default
    `model.request`), with the model-call policy (`call_retry`, a timeout, the limit `limit`).
    `events`: an event stream handler called inside the step with the model's live events."""

    def __init__(
        self,
        wrapped: Model,
        run: RunContext,
        *,
        stream: str | None = ANSWER,
        step: str = "model.request",
        limit: str | None = LIMIT,
        events: EventStreamHandler[Any] | None = None,
    ) -> None:
        super().__init__(wrapped)
        self.run = run
        self.stream_name = stream
        self.step_name = step
        self.limit = limit
        self.events = events

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        return await self._request(messages, model_settings, model_request_parameters, None)

    async def _request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None,
    ) -> ModelResponse:
        system = self.wrapped.system  # our endpoint is OpenAI-compatible: `openai` to GenAI
        with genai.chat(self.wrapped.model_name, "openai" if system == PROVIDER else system):
            recorded = await self._step(messages, model_settings, parameters, run_context)
        if isinstance(recorded, LegacyReply):
            return recorded.response(self.wrapped.model_name)
        return recorded

    async def _step(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None,
    ) -> ModelResponse | LegacyReply:
        settings = self.run.settings
        opened: list[OutputStream] = []  # the step's stream: its first call opens it
        return await self.run.step(
            self.step_name,
            self._ask,
            messages,
            model_settings,
            parameters,
            opened,
            run_context,
            retry=call_retry(settings),
            timeout=settings.llm_timeout_s + CALL_STEP_SLACK_S,
            limit=self.limit,
            reserve=expected_usage(messages, model_settings, settings, self.wrapped.model_name),
            drain=True,
        )

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """The step streams (to `answer`, and to the event handler) and records the whole
        response; the agent is given it as a completed stream, its parts replayed as events (as
        pydantic-ai's DBOS model)."""
        response = await self._request(
            messages, model_settings, model_request_parameters, run_context
        )
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )

    async def _ask(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        opened: list[OutputStream],
        run_context: ToolContext[Any] | None,
    ) -> ModelResponse | LegacyReply:
        """The step's body, once per call: ask the model (streaming, when a stream or an event
        handler is there). What it returns is a `ModelResponse`; the annotation lets the journal
        give back a `LegacyReply`. A call after a failed one first resets the stream."""
        out: OutputStream | None = None
        if self.stream_name is not None:
            if not opened:
                opened.append(self.run.stream(self.stream_name))
            else:
                opened[0].restart()  # what the failed call showed is dropped by readers
            out = opened[0]
        handler = self.events if run_context is not None else None
        call = await self.run.model_call(self.wrapped.model_name)  # billed once answered
        seen: list[RequestUsage] = []  # what the stream reported of its usage, as it went
        try:
            if out is None and handler is None:
                response = await self.wrapped.request(messages, model_settings, parameters)
            else:
                response = await self._streamed(
                    messages, model_settings, parameters, out, (handler, run_context, seen)
                )
        except ModelHTTPError as exc:
            await call.refused()  # an error status: not billed
            raise _fault(exc) from exc
        except (ModelAPIError, UnexpectedModelBehavior) as exc:
            await _cut(call, type(exc).__name__, seen)
            raise _fault(exc) from exc
        except BaseException as exc:  # a timeout, a cancel: billed, never kept
            await _cut(call, type(exc).__name__, seen)
            raise
        usage = response.usage
        self.run.record_usage(
            input_tokens=usage.input_tokens,
            output_tokens=usage.output_tokens,
            model=response.model_name,
        )  # with this step, once: Run.usage
        await self.run.emit("message", _message_event(response))
        return response

    async def _streamed(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        out: OutputStream | None,
        handled: tuple[EventStreamHandler[Any] | None, ToolContext[Any] | None, list[RequestUsage]],
    ) -> ModelResponse:
        parts = PartStream(out, parameters)
        handler, run_context, seen = handled
        async with self.wrapped.request_stream(
            messages, model_settings, parameters, run_context
        ) as streamed:
            seen.append(streamed.usage)

            async def events() -> AsyncIterator[Any]:
                async for event in streamed:
                    parts.see(event)
                    seen[-1] = streamed.usage
                    yield event

            live = events()
            if handler is not None and run_context is not None:
                await handler(run_context, live)  # live, inside the step: once per recording
            async for _ in live:  # what the handler left (or all of it, with no handler)
                pass
        response = streamed.get()
        parts.finish(response)
        if out is not None:
            await out.close()
        return response


async def _cut(call: ModelCallMark, reason: str, seen: list[RequestUsage]) -> None:
    """A call cut in the process: billed, with the tokens its stream reported, if any."""
    usage = seen[-1] if seen else None
    await call.cut(
        reason,
        input_tokens=usage.input_tokens if usage else 0,
        output_tokens=usage.output_tokens if usage else 0,
    )


def expected_usage(
    messages: list[ModelMessage],
    model_settings: ModelSettings | None,
    settings: Settings,
    model: str | None,
) -> Expected:
    """What a call may use, reserved before it starts (token limits, budgets): its prompt (about
    a token per 4 bytes of the messages as JSON, an over- rather than an under-estimate) and its
    output cap (`max_tokens`, else `OUTLIVE_LLM_MAX_OUTPUT_TOKENS`), priced by `model`."""
    prompt = len(ModelMessagesTypeAdapter.dump_json(messages)) // BYTES_PER_TOKEN + 1
    cap = (model_settings or {}).get("max_tokens") or settings.llm_max_output_tokens
    return Expected(input_tokens=prompt, output_tokens=int(cap), model=model)


def _log_body(status: int, body: object) -> None:
    """What the endpoint said, for the operator, at DEBUG only: it may echo the prompt, and no
    payload is logged at INFO or above (docs/governance.md)."""
    log.debug("llm endpoint answered %s: %.500s", status, body)


def _fault(exc: ModelAPIError | UnexpectedModelBehavior) -> Exception:
    """What a failed model call is to the run: a `RetryableFault` (`RetryAfter` when a 429 or
    503 says when) for what a retry may fix, else `LlmRejected`. Neither carries the endpoint's
    words (logged for the operator)."""
    if isinstance(exc, ModelHTTPError):
        status = exc.status_code
        if status == 429 or status >= 500:
            log.info("llm endpoint answered %s", status)
            _log_body(status, exc.body)
            wait = parse_retry_after((exc.headers or {}).get("retry-after"))
            if wait is not None and status in (429, 503):
                said = f"llm endpoint answered {status} (retry after {wait:g}s)"
                return RetryAfter(wait, said, status=status)
            return RetryableFault(f"llm endpoint answered {status}", status=status)
        log.warning("llm endpoint answered %s", status)
        _log_body(status, exc.body)
        return LlmRejected(f"llm endpoint answered {status}")
    if isinstance(exc, ModelTimeoutError):
        return RetryableFault("llm endpoint did not answer in time")
    if isinstance(exc, ModelConnectionError):
        return RetryableFault(f"llm endpoint unreachable ({_root(exc)})")
    if isinstance(exc, ModelAPIError):  # e.g. a stream cut off
        log.info("llm endpoint failed: %s", exc)
        return RetryableFault(f"llm endpoint failed ({type(exc).__name__})")
    log.warning("llm endpoint answered what is not a model response")
    log.debug("llm endpoint's answer: %.500s", exc)
    return LlmRejected("llm endpoint answered a body that is not a chat completion")


def _root(exc: BaseException) -> str:
    """The name of the innermost cause: what the transport said (`ConnectError`)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    return type(exc).__name__


def _message_event(response: ModelResponse) -> dict[str, Any]:
    """The `message` event a model step appends: its text, the tools it calls, its usage."""
    text = "".join(p.content for p in response.parts if isinstance(p, TextPart))
    calls = [
        {"tool": p.tool_name, "id": p.tool_call_id, "args": call_args(p)}
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    usage = {
        "inputTokens": response.usage.input_tokens,
        "outputTokens": response.usage.output_tokens,
    }
    return {"role": "assistant", "content": text, "toolCalls": calls, "usage": usage}
