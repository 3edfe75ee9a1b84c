"""GenAI spans: OpenTelemetry's semantic conventions for generative AI, tied to durable steps.

On when tracing is on (`tracing`) and `OTEL_SEMCONV_STABILITY_OPT_IN` lists
`gen_ai_latest_experimental` (the standard opt-in while those conventions are in development; the
variable is a comma-separated list). Off, every helper is one flag check.

- each attempt of a run is an `invoke_agent {agent}` span (a child of its `run attempt` span,
  so every attempt of a run is in the trace its `startRun` began);
- each durable step an agent marks as a model request (`chat`, as `DurableModel` does) is a
  `chat {model}` span (kind CLIENT) with `gen_ai.usage.input_tokens` / `output_tokens` from
  the usage recorded with it; a step marked as a tool call (`DurableToolset`) is an
  `execute_tool {tool}` span; a child run started (`ctx.spawn`, `ctx.call`, `ctx.map`) is an
  `invoke_workflow {agent}` span; any other step is a `step {name}` span of Outlive's own;
- `gen_ai.conversation.id` on every one of them is the run's key (`startRun`'s `key`), or its
  id when it has none: the runs of one key are one conversation;
- a step a later attempt gets back from the journal, instead of running it again, is a span of
  the same name marked `outlive.step.memoized=true`, with usage 0 and cost 0: nothing was bought.
  Summing `gen_ai.usage.*` over a trace's spans gives what the run paid for, `Run.usage`.

A span ends when its step is recorded. A worker that dies (SIGKILL) takes its open spans with it:
the attempt's `invoke_agent` and the step in flight are never exported, so the reply that step was
buying shows only as the span of the attempt that bought it again. With the batch exporter (the
OTLP default) the spans ended in the last `OTEL_BSP_SCHEDULE_DELAY` before the death are lost too.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from opentelemetry.trace import SpanKind

from outlive.telemetry import tracing

OPT_IN = "gen_ai_latest_experimental"
MEMOIZED = "outlive.step.memoized"
COST = "outlive.step.cost_usd"

_opted = False


@dataclass(frozen=True, slots=True)
class _Next:
    """What the next durable step is, as its caller said (`chat`, `tool`)."""

    operation: str  # chat | execute_tool
    name: str  # the model, or the tool
    provider: str | None = None
    call_id: str | None = None


_NEXT: ContextVar[_Next | None] = ContextVar("outlive_genai_next", default=None)
_STEP: ContextVar[Any] = ContextVar("outlive_genai_step", default=None)


def opt_in(value: str) -> None:
    """Go by `value`, the setting `OTEL_SEMCONV_STABILITY_OPT_IN` (the composition root's)."""
    global _opted
    _opted = OPT_IN in {v.strip() for v in value.split(",")}


def is_enabled() -> bool:
    return _opted and tracing.is_enabled()


def conversation_id(key: str, run_id: object) -> str:
    return key or str(run_id)


@contextmanager
def chat(model: str, provider: str | None = None) -> Iterator[None]:
    """The durable step awaited inside is a model request to `model` (of `provider`)."""
    token = _NEXT.set(_Next("chat", model, provider)) if is_enabled() else None
    try:
        yield
    finally:
        if token is not None:
            _NEXT.reset(token)


@contextmanager
def tool(name: str, call_id: str | None = None) -> Iterator[None]:
    """The durable step awaited inside calls the tool `name`."""
    token = _NEXT.set(_Next("execute_tool", name, call_id=call_id)) if is_enabled() else None
    try:
        yield
    finally:
        if token is not None:
            _NEXT.reset(token)


@contextmanager
def agent(
    name: str,
    conversation: str,
    *,
    run_id: object,
    attempt: int,
    expected: tuple[type[BaseException], ...] = (),
) -> Iterator[Any]:
    """One attempt of a run of agent `name`: `invoke_agent {name}`. An exception of `expected`
    (a park) ends it without an error."""
    if not is_enabled():
        yield None
        return
    attributes = {
        "gen_ai.operation.name": "invoke_agent",
        "gen_ai.agent.name": name,  # no `gen_ai.agent.id`: a run is an invocation, not an agent
        "gen_ai.conversation.id": conversation,
        "outlive.run_id": str(run_id),
        "outlive.attempt": attempt,
    }
    with _opened(f"invoke_agent {name}", SpanKind.INTERNAL, attributes, expected) as span:
        yield span


@contextmanager
def step(
    name: str,
    occurrence: int,
    conversation: str,
    expected: tuple[type[BaseException], ...] = (),
) -> Iterator[Any]:
    """One durable step (see the module's doc for its name); `memoized()` and `usage()` mark it.
    An exception of `expected` (a park) ends it without an error."""
    if not is_enabled():
        yield None
        return
    hint, token = _NEXT.get(), _NEXT.set(None)  # the step's function starts with no hint
    span_name, kind, attributes = _described(hint, name, occurrence, conversation)
    try:
        with _opened(span_name, kind, attributes, expected) as span:
            step_token = _STEP.set(span)
            try:
                yield span
            finally:
                _STEP.reset(step_token)
    finally:
        _NEXT.reset(token)


def _described(
    hint: _Next | None, name: str, occurrence: int, conversation: str
) -> tuple[str, SpanKind, dict[str, Any]]:
    attributes: dict[str, Any] = {
        "gen_ai.conversation.id": conversation,
        "outlive.step.name": name,
        "outlive.step.occurrence": occurrence,
        MEMOIZED: False,
    }
    if hint is None:
        return f"step {name}", SpanKind.INTERNAL, attributes
    attributes["gen_ai.operation.name"] = hint.operation
    if hint.operation == "chat":
        attributes["gen_ai.request.model"] = hint.name
        attributes["gen_ai.provider.name"] = hint.provider or "openai"
        return f"chat {hint.name}", SpanKind.CLIENT, attributes
    attributes["gen_ai.tool.name"] = hint.name
    attributes["gen_ai.tool.type"] = "function"
    if hint.call_id is not None:
        attributes["gen_ai.tool.call.id"] = hint.call_id
    return f"execute_tool {hint.name}", SpanKind.INTERNAL, attributes


def memoized() -> None:
    """The step being run was given back from the journal: nothing was run, nothing bought."""
    span = _STEP.get()
    if span is None:
        return
    span.set_attribute(MEMOIZED, True)
    span.set_attribute(COST, 0.0)
    if span.attributes.get("gen_ai.operation.name") == "chat":
        span.set_attribute("gen_ai.usage.input_tokens", 0)
        span.set_attribute("gen_ai.usage.output_tokens", 0)


def usage(
    *, input_tokens: int, output_tokens: int, model: str | None, cost_usd: float | None
) -> None:
    """What the step being executed used, as recorded with it (on its span, if any)."""
    span = _STEP.get()
    if span is None:
        return
    span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
    span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
    if model is not None:
        span.set_attribute("gen_ai.response.model", model)
    if cost_usd is not None:
        span.set_attribute(COST, cost_usd)


@contextmanager
def child(
    agent_name: str,
    step_name: str,
    conversation: str,
    expected: tuple[type[BaseException], ...] = (),
) -> Iterator[Any]:
    """Child runs started by one call of `ctx.spawn`/`ctx.call`/`ctx.map`: `invoke_workflow`."""
    if not is_enabled():
        yield None
        return
    attributes = {
        "gen_ai.operation.name": "invoke_workflow",
        "gen_ai.workflow.name": agent_name,
        "gen_ai.conversation.id": conversation,
        "outlive.step.name": step_name,
    }
    with _opened(f"invoke_workflow {agent_name}", SpanKind.INTERNAL, attributes, expected) as span:
        yield span


@contextmanager
def _opened(
    name: str,
    kind: SpanKind,
    attributes: dict[str, Any],
    expected: tuple[type[BaseException], ...],
) -> Iterator[Any]:
    """A span that an exception of `expected` (a park: the run goes on later) ends without an
    error: it is raised again once the span has ended, not through it (the SDK would record it)."""
    parked: BaseException | None = None
    with tracing.span(name, kind=kind, attributes=attributes) as span:
        try:
            yield span
        except expected as exc:
            span.set_attribute("outlive.parked", True)
            parked = exc
        except BaseException as exc:
            span.set_attribute("error.type", type(exc).__name__)
            tracing.fail(span, exc)
            raise
    if parked is not None:
        raise parked
