"""Any `pydantic_ai.Agent` as an Outlive agent: `durable(agent, name=, input_model=, prompt=)`.

It follows pydantic-ai's durable-execution interface as its Temporal, DBOS and Prefect
integrations do: a wrapper model (`DurableModel`) and wrapper toolsets (`DurableToolset`) put in
place with `Agent.override` for the run, so the agent itself is not changed.

- **Every model request is a durable step** (`model.request`): its `ModelResponse` is recorded
  (with its usage), and a later attempt of the run gets it back without asking the model again.
  While the step runs, the response's text deltas go to the run's stream `answer`.
- **Every model request has the model-call policy** (contract §6, `call_retry`): a 429, a 5xx,
  a transport error or a timeout (`OUTLIVE_LLM_TIMEOUT_S`) is retried inside the attempt, up to
  5 calls, waiting what a `Retry-After` says or else a backoff from 1 s
  (`OUTLIVE_LLM_RETRY_BACKOFF_S`) doubling to 60 s; only then is it a retryable fault of the run.
  Each call takes the named limit `llm` first (`outlive.services.limits`) and its usage is
  spent against that limit's token rates. Any other refusal fails the run at once
  (`LlmRejected`). What the tenant reads of a failure (`Run.error`) names the status, never the
  endpoint's body, which may carry the operator's account details (issue 26, L2): that is logged.
- **Every tool call is a durable step** (`tool.<name>`): a tool that completed is never run
  again by a later attempt; its result is recorded as JSON (a model comes back as a dict).
- **Approvals.** A tool marked `requires_approval=True` defers its call: the run waits
  (WAITING, no worker held) for the signal `approval`, whose payload `{approved, reason}`
  answers the call (`ToolApproved`, or `ToolDenied(reason)`), and the agent goes on.

Replaying a run is deterministic because everything that is not deterministic (the model, the
tools, the approvals) comes from the journal: the agent is run again from the top on each
attempt, and each step returns what it recorded.
"""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, ConfigDict, TypeAdapter
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.agent import AgentRunResult
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
    PartDeltaEvent,
    PartStartEvent,
    TextPart,
    TextPartDelta,
    ToolCallPart,
)
from pydantic_ai.models import (
    CompletedStreamedResponse,
    Model,
    ModelRequestParameters,
    StreamedResponse,
    infer_model,
)
from pydantic_ai.models.wrapper import WrapperModel
from pydantic_ai.settings import ModelSettings
from pydantic_ai.tools import RunContext as ToolContext
from pydantic_ai.toolsets import AbstractToolset, WrapperToolset
from pydantic_ai.toolsets.abstract import ToolsetTool

from outlive.agents.openai_chat import ModelNotConfigured, openai_compatible
from outlive.agents.policy import Expected, Retry, parse_retry_after
from outlive.agents.registry import Agent, OutputStream, RunContext
from outlive.config import Settings
from outlive.errors import RetryableFault, RetryAfter

log = logging.getLogger(__name__)

P = TypeVar("P", bound=BaseModel)

ANSWER = "answer"  # the stream the model's text goes to
APPROVAL = "approval"  # the signal that answers a tool call waiting for approval
LIMIT = "llm"  # the named limit each model call takes
CALL_ATTEMPTS = 5
CALL_MAX_BACKOFF_S = 60.0
CALL_STEP_SLACK_S = 5.0  # the step's own deadline: the HTTP timeout and this
BYTES_PER_TOKEN = 4  # a prompt's tokens, estimated from its JSON (reserved before the call)
_JSON: TypeAdapter[Any] = TypeAdapter(Any)

__all__ = [
    "ANSWER",
    "APPROVAL",
    "LIMIT",
    "DurableModel",
    "DurableToolset",
    "LlmRejected",
    "ModelNotConfigured",
    "call_retry",
    "durable",
    "openai_compatible",
]


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
    `model.request`), with the model-call policy (`call_retry`, a timeout, the limit `limit`)."""

    def __init__(
        self,
        wrapped: Model,
        run: RunContext,
        *,
        stream: str | None = ANSWER,
        step: str = "model.request",
        limit: str | None = LIMIT,
    ) -> None:
        super().__init__(wrapped)
        self.run = run
        self.stream_name = stream
        self.step_name = step
        self.limit = limit

    async def request(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
    ) -> ModelResponse:
        settings = self.run.settings
        opened: list[OutputStream] = []  # the step's stream: its first call opens it
        recorded: ModelResponse | LegacyReply = await self.run.step(
            self.step_name,
            self._ask,
            messages,
            model_settings,
            model_request_parameters,
            opened,
            retry=call_retry(settings),
            timeout=settings.llm_timeout_s + CALL_STEP_SLACK_S,
            limit=self.limit,
            reserve=expected_usage(messages, model_settings, settings, self.wrapped.model_name),
        )
        if isinstance(recorded, LegacyReply):
            return recorded.response(self.wrapped.model_name)
        return recorded

    @asynccontextmanager
    async def request_stream(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        model_request_parameters: ModelRequestParameters,
        run_context: ToolContext[Any] | None = None,
    ) -> AsyncIterator[StreamedResponse]:
        """The step streams (to `answer`) and records the whole response; the agent is given it
        as a completed stream, its parts replayed as events (as pydantic-ai's DBOS model)."""
        response = await self.request(messages, model_settings, model_request_parameters)
        yield CompletedStreamedResponse(
            response, model_request_parameters=model_request_parameters, replay_events=True
        )

    async def _ask(
        self,
        messages: list[ModelMessage],
        model_settings: ModelSettings | None,
        parameters: ModelRequestParameters,
        opened: list[OutputStream],
    ) -> ModelResponse | LegacyReply:
        """The step's body: ask the model (streaming its text when a stream is named). What it
        returns is a `ModelResponse`; the annotation lets the journal give back a `LegacyReply`."""
        try:
            if self.stream_name is None:
                response = await self.wrapped.request(messages, model_settings, parameters)
            else:
                if not opened:
                    opened.append(self.run.stream(self.stream_name))
                response = await self._streamed(messages, model_settings, parameters, opened[0])
        except (ModelAPIError, UnexpectedModelBehavior) as exc:
            raise _fault(exc) from exc
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
        out: OutputStream,
    ) -> ModelResponse:
        async with self.wrapped.request_stream(messages, model_settings, parameters) as streamed:
            async for event in streamed:
                if isinstance(event, PartStartEvent) and isinstance(event.part, TextPart):
                    out.write(event.part.content)
                elif isinstance(event, PartDeltaEvent) and isinstance(event.delta, TextPartDelta):
                    out.write(event.delta.content_delta)
        await out.close()
        return streamed.get()


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


def _fault(exc: ModelAPIError | UnexpectedModelBehavior) -> Exception:
    """What a failed model call is to the run: a `RetryableFault` (`RetryAfter` when a 429 or
    503 says when) for what a retry may fix, else `LlmRejected`. Neither carries the endpoint's
    words (logged for the operator)."""
    if isinstance(exc, ModelHTTPError):
        status = exc.status_code
        if status == 429 or status >= 500:
            log.info("llm endpoint answered %s: %.500s", status, exc.body)
            wait = parse_retry_after((exc.headers or {}).get("retry-after"))
            if wait is not None and status in (429, 503):
                return RetryAfter(wait, f"llm endpoint answered {status} (retry after {wait:g}s)")
            return RetryableFault(f"llm endpoint answered {status}")
        log.warning("llm endpoint answered %s: %.500s", status, exc.body)
        return LlmRejected(f"llm endpoint answered {status}")
    if isinstance(exc, ModelTimeoutError):
        return RetryableFault("llm endpoint did not answer in time")
    if isinstance(exc, ModelConnectionError):
        return RetryableFault(f"llm endpoint unreachable ({_root(exc)})")
    if isinstance(exc, ModelAPIError):  # e.g. a stream cut off
        log.info("llm endpoint failed: %s", exc)
        return RetryableFault(f"llm endpoint failed ({type(exc).__name__})")
    log.warning("llm endpoint answered what is not a model response: %.500s", exc)
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
        {"tool": p.tool_name, "id": p.tool_call_id, "args": p.args_as_dict()}
        for p in response.parts
        if isinstance(p, ToolCallPart)
    ]
    usage = {
        "inputTokens": response.usage.input_tokens,
        "outputTokens": response.usage.output_tokens,
    }
    return {"role": "assistant", "content": text, "toolCalls": calls, "usage": usage}


class DurableToolset(WrapperToolset[Any]):
    """A toolset whose every call is a durable step of the run (`tool.<name>`)."""

    def __init__(self, wrapped: AbstractToolset[Any], run: RunContext) -> None:
        super().__init__(wrapped)
        self.run = run

    async def call_tool(
        self,
        name: str,
        tool_args: dict[str, Any],
        ctx: ToolContext[Any],
        tool: ToolsetTool[Any],
    ) -> Any:
        async def call() -> Any:
            result = await self.wrapped.call_tool(name, tool_args, ctx, tool)
            await self.run.emit("tool", {"tool": name, "id": ctx.tool_call_id})
            return _JSON.dump_python(result, mode="json")

        return await self.run.step(f"tool.{name}", call)


class Approval(BaseModel):
    """The payload of the signal `approval`."""

    approved: bool
    reason: str | None = None


def _answers(requests: DeferredToolRequests, payloads: Sequence[Any]) -> DeferredToolResults:
    approvals: dict[str, Any] = {}
    for call, payload in zip(requests.approvals, payloads, strict=True):
        answer = Approval.model_validate(payload or {"approved": False})
        approvals[call.tool_call_id] = (
            True
            if answer.approved
            else ToolDenied(answer.reason or "The tool call was not approved.")
        )
    return DeferredToolResults(approvals=approvals)


class DeferredCallsUnsupported(Exception):
    """A tool deferred its call for external execution: only approvals are answered here."""


class _Durable(Generic[P]):
    def __init__(
        self,
        agent: PydanticAgent[Any, Any],
        prompt: Callable[[P], str],
        deps: Callable[[RunContext, P], Any] | None,
        model: Callable[[RunContext], Model] | None,
        stream: str | None,
        limit: str | None,
    ) -> None:
        self.agent, self.prompt, self.deps, self.model = agent, prompt, deps, model
        self.stream, self.limit = stream, limit

    async def __call__(self, ctx: RunContext, params: P) -> dict[str, Any]:
        agent = self.agent
        inner = self.model(ctx) if self.model is not None else infer_model(agent.model)  # type: ignore[arg-type]  # the agent's own model
        model = DurableModel(inner, ctx, stream=self.stream, limit=self.limit)
        toolsets = [DurableToolset(t, ctx) for t in agent.toolsets]
        deps = self.deps(ctx, params) if self.deps is not None else None
        history: list[ModelMessage] | None = None
        answers: DeferredToolResults | None = None
        with agent.override(model=model, toolsets=toolsets, tools=[]):  # its tools: in toolsets
            while True:
                result: AgentRunResult[Any] = await agent.run(
                    self.prompt(params) if history is None else None,
                    message_history=history,
                    deferred_tool_results=answers,
                    output_type=[agent.output_type, DeferredToolRequests],
                    deps=deps,
                )
                output = result.output
                if not isinstance(output, DeferredToolRequests):
                    return {"output": _JSON.dump_python(output, mode="json")}
                if output.calls:
                    raise DeferredCallsUnsupported(
                        f"tools {[c.tool_name for c in output.calls]} deferred their calls; only"
                        " approvals (requires_approval=True) are answered, by the signal"
                        f" {APPROVAL!r}"
                    )
                payloads = [await ctx.wait_for(APPROVAL) for _ in output.approvals]
                history, answers = result.all_messages(), _answers(output, payloads)


def durable(
    agent: PydanticAgent[Any, Any],
    *,
    name: str,
    input_model: type[P],
    prompt: Callable[[P], str],
    description: str | None = None,
    deps: Callable[[RunContext, P], Any] | None = None,
    model: Callable[[RunContext], Model] | None = None,
    stream: str | None = ANSWER,
    limit: str | None = LIMIT,
) -> Agent[P]:
    """`agent` as an Outlive agent named `name`, whose input is `input_model` and whose user
    prompt is `prompt(params)`. `deps(ctx, params)` makes the run's deps (none: None); `model(ctx)`
    the model (none: the agent's own); `stream` names the stream its text goes to (None: none);
    `limit` the named limit each model call takes (None: none).
    Its output is `{"output": <the agent's output, as JSON>}`."""
    return Agent(
        name=name,
        description=description or f"pydantic-ai agent {agent.name or name!r}",
        input_model=input_model,
        run=_Durable(agent, prompt, deps, model, stream, limit),
    )
