"""The `llm` agent (contract §6): a chat with an OpenAI-compatible endpoint.

Each model call is a durable step (`ctx.step("reply", ...)`) and its reply a `message` event
written with it: an attempt after a crash mid-conversation gets the earlier replies back from the
journal instead of paying for them again. A reply cut off by the length limit is continued, up
to `maxTurns` replies, and the output's `reply` is the whole answer, the replies joined.

Each call has its own policy (`call_retry`): a 429, a 5xx, a transport error or a timeout
(`OUTLIVE_LLM_TIMEOUT_S`, per call) is retried inside the attempt, up to 5 calls, waiting what a
`Retry-After` says or else a backoff from 1 s (`OUTLIVE_LLM_RETRY_BACKOFF_S`) doubling to 60 s,
with jitter; only then is it a
retryable fault of the run. Each call takes the named limit `llm` first (`outlive.services.limits`)
and records the endpoint's `usage`. Any other answer fails the run at once. What the tenant reads
of a failure (`Run.error`) names the status, never the endpoint's body: that body may carry the
operator's account details (issue 26, L2); it is logged for the operator instead.

With `stream` (the default) the call asks for server-sent events and each text delta goes to
the run's stream `answer` as it arrives (`ctx.stream`: batched, never journaled); the step still
records the whole reply, which is the truth a client reads once the step is done. The endpoint
is asked to include `usage` in the stream (`stream_options.include_usage`).

The model-call code (`Endpoint`, `complete`) is kept apart from the agent so that other agents
can reuse it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.policy import Retry, parse_retry_after
from outlive.agents.registry import Agent, OutputStream, RunContext
from outlive.config import Settings
from outlive.errors import RetryableFault, RetryAfter

log = logging.getLogger(__name__)

CALL_ATTEMPTS = 5
CALL_MAX_BACKOFF_S = 60.0
LIMIT = "llm"
ANSWER = "answer"  # the stream a reply's tokens go to


class LlmInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=20_000)
    max_turns: int = Field(1, ge=1, le=20, description="most model replies to ask for")
    system: str | None = Field(None, max_length=20_000, description="a system prompt")
    model: str | None = Field(
        None, min_length=1, max_length=200, description="one of OUTLIVE_LLM_MODELS"
    )
    stream: bool = Field(True, description="the reply's tokens go to the stream `answer`")


class LlmNotConfigured(Exception):
    """OUTLIVE_LLM_BASE_URL is not set, or the run asked for a model it does not allow."""


class LlmRejected(Exception):
    """The endpoint refused the request in a way a retry cannot fix."""


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to call the model: `Endpoint.from_settings(settings)`."""

    url: str
    headers: dict[str, str]
    timeout_s: float

    @classmethod
    def from_settings(cls, settings: Settings) -> Endpoint:
        if not settings.llm_base_url:
            raise LlmNotConfigured("the llm agent needs OUTLIVE_LLM_BASE_URL")
        headers = {}
        if settings.llm_api_key is not None:
            headers["Authorization"] = f"Bearer {settings.llm_api_key.get_secret_value()}"
        url = settings.llm_base_url.rstrip("/") + "/chat/completions"
        return cls(url, headers, settings.llm_timeout_s)


@dataclass(frozen=True, slots=True)
class Completion:
    content: str
    finish_reason: str | None
    usage: dict[str, int] | None


def call_retry(settings: Settings) -> Retry:
    """The policy of one model call: up to 5 calls, backoff from `OUTLIVE_LLM_RETRY_BACKOFF_S`."""
    return Retry(
        attempts=CALL_ATTEMPTS,
        backoff=settings.llm_retry_backoff_s,
        max_backoff=CALL_MAX_BACKOFF_S,
    )


def choose_model(settings: Settings, asked: str | None) -> str:
    """The model to call: `asked` when `OUTLIVE_LLM_MODELS` allows it (or it is the default),
    else `LlmNotConfigured`; the default `OUTLIVE_LLM_MODEL` when none was asked for."""
    if asked is None or asked == settings.llm_model:
        return settings.llm_model
    if asked not in settings.llm_models:
        raise LlmNotConfigured(f"model {asked!r} is not allowed here (OUTLIVE_LLM_MODELS)")
    return asked


async def complete(
    http: httpx.AsyncClient,
    endpoint: Endpoint,
    model: str,
    messages: list[dict[str, str]],
    *,
    on_delta: Callable[[str], None] | None = None,
) -> Completion:
    """One chat completion; with `on_delta`, streamed (each text delta is given to it as it
    arrives). A 429/5xx or a transport error is a `RetryableFault` (`RetryAfter` when the answer
    says when); another non-2xx, or a body that is not a completion, is `LlmRejected`. Neither
    carries the endpoint's body (it is logged)."""
    body: dict[str, Any] = {"model": model, "messages": messages}
    if on_delta is not None:
        body |= {"stream": True, "stream_options": {"include_usage": True}}
    request = http.build_request(
        "POST", endpoint.url, json=body, headers=endpoint.headers, timeout=endpoint.timeout_s
    )
    try:
        response = await http.send(request, stream=True)
        try:
            await _refuse_failure(response)
            if on_delta is not None and _is_event_stream(response):
                return await _streamed(response, on_delta)
            await response.aread()  # not asked to stream, or an endpoint that does not
            done = _completion(response)
            if on_delta is not None and done.content:
                on_delta(done.content)
            return done
        finally:
            await response.aclose()
    except httpx.TimeoutException as exc:
        raise RetryableFault(f"llm endpoint did not answer within {endpoint.timeout_s:g}s") from exc
    except httpx.TransportError as exc:
        raise RetryableFault(f"llm endpoint unreachable ({type(exc).__name__})") from exc


def _is_event_stream(response: httpx.Response) -> bool:
    return str(response.headers.get("content-type", "")).startswith("text/event-stream")


async def _refuse_failure(response: httpx.Response) -> None:
    status = response.status_code
    if response.is_success:
        return
    text = (await response.aread()).decode(errors="replace")
    if status == 429 or status >= 500:
        log.info("llm endpoint answered %s: %.500s", status, text)
        wait = parse_retry_after(response.headers.get("retry-after"))
        if wait is not None and status in (429, 503):
            raise RetryAfter(wait, f"llm endpoint answered {status} (retry after {wait:g}s)")
        raise RetryableFault(f"llm endpoint answered {status}")
    log.warning("llm endpoint answered %s: %.500s", status, text)
    raise LlmRejected(f"llm endpoint answered {status}")


async def _streamed(response: httpx.Response, on_delta: Callable[[str], None]) -> Completion:
    """The server-sent events of a streamed completion, read to their `[DONE]`."""
    parts: list[str] = []
    finish: str | None = None
    counts: dict[str, int] | None = None
    async for line in response.aiter_lines():
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        try:
            chunk = json.loads(data)
            choices = chunk.get("choices") or []
            delta = str((choices[0].get("delta") or {}).get("content") or "") if choices else ""
            finish = (choices[0].get("finish_reason") if choices else None) or finish
        except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
            log.warning("llm endpoint streamed an unexpected event: %.500s", data)
            raise LlmRejected("llm endpoint streamed an event that is not a chunk") from exc
        if delta:
            parts.append(delta)
            on_delta(delta)
        counts = _counts(chunk.get("usage")) or counts
    return Completion("".join(parts), finish, counts)


def _counts(usage: Any) -> dict[str, int] | None:
    if not isinstance(usage, dict):
        return None
    return {k: v for k, v in usage.items() if isinstance(v, int) and not isinstance(v, bool)}


def _completion(response: httpx.Response) -> Completion:
    try:
        body = response.json()
        choice: dict[str, Any] = body["choices"][0]
        content = str((choice.get("message") or {}).get("content") or "")
    except (ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        log.warning("llm endpoint answered an unexpected body: %.500s", response.text)
        raise LlmRejected("llm endpoint answered a body that is not a chat completion") from exc
    usage = body.get("usage") if isinstance(body, dict) else None
    return Completion(content, choice.get("finish_reason"), _counts(usage))


async def run(ctx: RunContext, params: LlmInput) -> dict[str, Any]:
    endpoint = Endpoint.from_settings(ctx.settings)
    model = choose_model(ctx.settings, params.model)
    messages: list[dict[str, str]] = []
    if params.system:
        messages.append({"role": "system", "content": params.system})
    messages.append({"role": "user", "content": params.prompt})

    streams: dict[int, OutputStream] = {}  # one per reply, opened in its step, ended with it

    async def ask(reply: int) -> dict[str, Any]:
        on_delta = None
        if params.stream:  # a call the step's policy retries writes on to the same stream
            if reply not in streams:
                streams[reply] = ctx.stream(ANSWER)
            on_delta = streams[reply].write
        done = await complete(ctx.http, endpoint, model, messages, on_delta=on_delta)
        usage = done.usage or {}
        ctx.record_usage(
            input_tokens=usage.get("prompt_tokens", 0),
            output_tokens=usage.get("completion_tokens", 0),
            model=model,
        )
        await ctx.emit("message", {"role": "assistant", "content": done.content})
        return {"content": done.content, "finish_reason": done.finish_reason}

    retry = call_retry(ctx.settings)
    replies: list[str] = []
    for reply in range(params.max_turns):
        await ctx.checkpoint()
        choice = await ctx.step(
            "reply", ask, reply, retry=retry, timeout=endpoint.timeout_s + 5, limit=LIMIT
        )
        replies.append(str(choice["content"]))
        messages.append({"role": "assistant", "content": replies[-1]})
        if choice["finish_reason"] != "length":
            break
        messages.append({"role": "user", "content": "Continue."})
    return {"reply": "".join(replies), "turns": len(replies)}


AGENT = Agent(
    name="llm",
    description="Chats with the configured OpenAI-compatible endpoint; each reply is a `message`.",
    input_model=LlmInput,
    run=run,
)
