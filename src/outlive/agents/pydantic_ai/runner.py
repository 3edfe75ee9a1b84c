"""`durable(agent, ...)`: any `pydantic_ai.Agent` as an Outlive agent.

The agent runs with `Agent.override` putting a `DurableModel` and durable toolsets in place of
its own for the run (the agent itself is not changed). Every attempt runs it from the top; what
is not deterministic (the model, the tools and what they raised, the events handled, the
approvals) comes from the journal, so the replay takes the same path and reaches the first
unfinished step. What a run may choose (a model from an allow-list, model settings, usage limits,
a message history) comes from its input; a deferred call waits for a signal bound to it
(`deferred`); a chat (`Chat`) waits for its next message between turns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

from pydantic import BaseModel, TypeAdapter
from pydantic_ai import Agent as PydanticAgent
from pydantic_ai import DeferredToolRequests, DeferredToolResults
from pydantic_ai.agent import AgentRunResult, EventStreamHandler
from pydantic_ai.messages import (
    ModelMessage,
    ModelMessagesTypeAdapter,
    ModelRequest,
    ModelResponse,
)
from pydantic_ai.models import Model, infer_model
from pydantic_ai.providers import Provider
from pydantic_ai.settings import ModelSettings
from pydantic_ai.usage import UsageLimits

from outlive.agents.pydantic_ai.deferred import SIGNALS, CallWaits, answer
from outlive.agents.pydantic_ai.events import DurableEvents
from outlive.agents.pydantic_ai.models import ANSWER, LIMIT, DurableModel
from outlive.agents.pydantic_ai.toolsets import ToolPolicy, durable_toolsets
from outlive.agents.registry import Agent, RunContext, Signal
from outlive.db.models import RunConflict
from outlive.errors import BadUserInput

P = TypeVar("P", bound=BaseModel)

_JSON: TypeAdapter[Any] = TypeAdapter(Any)
INPUT = "input"  # the signal a chat's next message comes as (startRun with SIGNAL_EXISTING)

# A model the run may use: a `Model`, a pydantic-ai model name ("openai:gpt-4o"), or a factory
# of the run's context (a model per tenant, say).
ModelChoice = Model | str | Callable[[RunContext], Model]


@dataclass(frozen=True)
class Chat:
    """A multi-turn conversation in one run: after each answer the run waits (WAITING, no
    worker held) for its next message, the signal `input` (what `startRun` with
    `onConflict: SIGNAL_EXISTING` delivers to the active run of the conversation's key), for
    at most `idle_s` seconds, and then answers it with the conversation so far as the message
    history (carried in the journal). It ends after `idle_s` without a message, or after
    `max_turns` answers; its output is the last answer and the count of turns."""

    idle_s: float = 3600.0
    max_turns: int = 100


@dataclass(frozen=True)
class _Options(Generic[P]):
    prompt: Callable[[P], str]
    deps: Callable[[RunContext, P], Any] | None = None
    model: Callable[[RunContext], Model] | None = None
    models: Mapping[str, ModelChoice] = field(default_factory=dict)
    choose_model: Callable[[P], str | None] | None = None
    provider_factory: Callable[[RunContext, str], Provider[Any]] | None = None
    model_settings: ModelSettings | Callable[[P], ModelSettings | None] | None = None
    usage_limits: UsageLimits | Callable[[P], UsageLimits | None] | None = None
    message_history: Callable[[P], Sequence[Any] | None] | None = None
    events: EventStreamHandler[Any] | None = None
    stream: str | None = ANSWER
    limit: str | None = LIMIT
    tool_policy: ToolPolicy | None = None
    tool_policies: Mapping[str, ToolPolicy] = field(default_factory=dict)
    chat: Chat | None = None


def _per_run(value: Any, params: BaseModel) -> Any:
    return value(params) if callable(value) else value


class _Durable(Generic[P]):
    def __init__(self, agent: PydanticAgent[Any, Any], options: _Options[P]) -> None:
        self.agent, self.options = agent, options

    def check(self, params: P) -> None:
        """At `startRun`: a model the input chooses must be in the allow-list."""
        chosen = self.options.choose_model(params) if self.options.choose_model else None
        if chosen is not None and chosen not in self.options.models:
            known = ", ".join(sorted(self.options.models)) or "none"
            raise BadUserInput(f"model {chosen!r} is not allowed (allowed: {known})")

    def inner_model(self, ctx: RunContext, params: P) -> Model:
        options = self.options
        chosen = options.choose_model(params) if options.choose_model else None
        choice: ModelChoice | None = options.models.get(chosen) if chosen is not None else None
        if choice is None:
            choice = options.model if options.model is not None else self.agent.model
        if isinstance(choice, Model):
            return choice
        if isinstance(choice, str):
            factory = options.provider_factory
            if factory is None:
                return infer_model(choice)
            return infer_model(choice, provider_factory=lambda provider: factory(ctx, provider))
        if choice is None:
            raise BadUserInput("this agent has no model (give durable() a model)")
        return choice(ctx)

    async def __call__(self, ctx: RunContext, params: P) -> dict[str, Any]:
        agent, options = self.agent, self.options
        model = DurableModel(
            self.inner_model(ctx, params),
            ctx,
            stream=options.stream,
            limit=options.limit,
            events=options.events,
        )
        toolsets = durable_toolsets(
            list(agent.toolsets),
            ctx,
            policies=options.tool_policies,
            default=options.tool_policy,
            stream=options.stream,
        )
        with agent.override(model=model, toolsets=toolsets, tools=[]):  # its tools: in toolsets
            if options.chat is None:
                output, _ = await self._turn(ctx, params, self._history(params), CallWaits())
                return {"output": _JSON.dump_python(output, mode="json")}
            return await self._chat(ctx, params, options.chat)

    def _history(self, params: P) -> list[ModelMessage] | None:
        given = self.options.message_history(params) if self.options.message_history else None
        if not given:
            return None
        if all(isinstance(m, ModelRequest | ModelResponse) for m in given):
            return list(given)
        return ModelMessagesTypeAdapter.validate_python(list(given))

    async def _turn(
        self, ctx: RunContext, params: P, history: list[ModelMessage] | None, waits: CallWaits
    ) -> tuple[Any, list[ModelMessage]]:
        """One user message answered: the agent run, and again after each deferred call's
        answer. Its output and the conversation so far."""
        options = self.options
        prompt: str | None = options.prompt(params)
        answers: DeferredToolResults | None = None
        events = DurableEvents(ctx, options.events) if options.events is not None else None
        while True:
            result: AgentRunResult[Any] = await self.agent.run(
                prompt,
                message_history=history,
                deferred_tool_results=answers,
                output_type=[self.agent.output_type, DeferredToolRequests],
                deps=options.deps(ctx, params) if options.deps is not None else None,
                model_settings=_per_run(options.model_settings, params),
                usage_limits=_per_run(options.usage_limits, params),
                event_stream_handler=events,
            )
            history = result.all_messages()
            if not isinstance(result.output, DeferredToolRequests):
                return result.output, history
            prompt, answers = None, await answer(ctx, result.output, waits)

    async def _chat(self, ctx: RunContext, params: P, chat: Chat) -> dict[str, Any]:
        history, waits, turns = self._history(params), CallWaits(), 0
        message: P = params
        while True:
            output, history = await self._turn(ctx, message, history, waits)
            turns += 1
            shown = _JSON.dump_python(output, mode="json")
            await ctx.step("chat.turn", _turned, ctx, turns, shown)  # its event, once
            if turns >= chat.max_turns:
                break
            nxt = await ctx.wait_for(INPUT, timeout=chat.idle_s)
            if nxt is None:  # no message for `idle_s`: the conversation is over
                break
            message = type(params).model_validate(nxt)
        return {"output": shown, "turns": turns}


async def _turned(ctx: RunContext, turn: int, output: Any) -> None:
    await ctx.emit("turn", {"turn": turn, "output": output})


def durable(
    agent: PydanticAgent[Any, Any],
    *,
    name: str,
    input_model: type[P],
    prompt: Callable[[P], str],
    description: str | None = None,
    deps: Callable[[RunContext, P], Any] | None = None,
    model: Callable[[RunContext], Model] | None = None,
    models: Mapping[str, ModelChoice] | None = None,
    choose_model: Callable[[P], str | None] | None = None,
    provider_factory: Callable[[RunContext, str], Provider[Any]] | None = None,
    model_settings: ModelSettings | Callable[[P], ModelSettings | None] | None = None,
    usage_limits: UsageLimits | Callable[[P], UsageLimits | None] | None = None,
    message_history: Callable[[P], Sequence[Any] | None] | None = None,
    event_stream_handler: EventStreamHandler[Any] | None = None,
    tool_policy: ToolPolicy | None = None,
    tool_policies: Mapping[str, ToolPolicy] | None = None,
    key: Callable[[P], str] | None = None,
    on_conflict: RunConflict | None = None,
    chat: Chat | None = None,
    stream: str | None = ANSWER,
    limit: str | None = LIMIT,
) -> Agent[P]:
    """`agent` as an Outlive agent named `name`, whose input is `input_model` and whose user
    prompt is `prompt(params)`; its output is `{"output": <the agent's output, as JSON>}` (and
    `"turns"` for a `chat`). Every option is in docs/pydantic-ai.md ("Options")."""
    options = _Options(
        prompt, deps, model, dict(models or {}), choose_model, provider_factory,
        model_settings, usage_limits, message_history, event_stream_handler, stream, limit,
        tool_policy, dict(tool_policies or {}), chat,
    )  # fmt: skip
    runner = _Durable(agent, options)
    signals: dict[str, Signal] = dict(SIGNALS)
    if chat is not None:
        signals[INPUT] = Signal(input_model)
    return Agent(
        name=name,
        description=description or f"pydantic-ai agent {agent.name or name!r}",
        input_model=input_model,
        run=runner,
        key=key,
        on_conflict=on_conflict,
        signals=signals,
        check=runner.check if choose_model is not None else None,
    )
