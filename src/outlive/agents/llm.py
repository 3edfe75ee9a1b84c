"""The `llm` agent (contract §6): a chat with an OpenAI-compatible endpoint.

Each model call is a durable step (`ctx.step("reply", ...)`) and its reply a `message` event
written with it: an attempt after a crash mid-conversation gets the earlier replies back from the
journal instead of paying for them again. A reply cut off by the length limit is continued, up
to `maxTurns` replies. 429, 5xx, transport errors and timeouts are retryable faults; any other
non-2xx answer, or a missing configuration, fails the run at once.
"""

from __future__ import annotations

import logging
from typing import Any

import httpx
from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from outlive.agents.registry import Agent, RunContext
from outlive.errors import RetryableFault

log = logging.getLogger(__name__)


class LlmInput(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid")

    prompt: str = Field(min_length=1, max_length=20_000)
    max_turns: int = Field(1, ge=1, le=20, description="most model replies to ask for")


class LlmNotConfigured(Exception):
    """OUTLIVE_LLM_BASE_URL is not set."""


class LlmRejected(Exception):
    """The endpoint refused the request in a way a retry cannot fix."""


async def run(ctx: RunContext, params: LlmInput) -> dict[str, Any]:
    settings = ctx.settings
    if not settings.llm_base_url:
        raise LlmNotConfigured("the llm agent needs OUTLIVE_LLM_BASE_URL")
    headers = {}
    if settings.llm_api_key is not None:
        headers["Authorization"] = f"Bearer {settings.llm_api_key.get_secret_value()}"
    url = settings.llm_base_url.rstrip("/") + "/chat/completions"
    messages: list[dict[str, str]] = [{"role": "user", "content": params.prompt}]
    reply = ""
    turns = 0

    async def ask() -> dict[str, Any]:
        await ctx.checkpoint()
        choice = await _complete(
            ctx.http, url, headers, settings.llm_model, messages, settings.llm_timeout_s
        )
        content = str(choice.get("message", {}).get("content") or "")
        await ctx.emit("message", {"role": "assistant", "content": content})
        return {"content": content, "finish_reason": choice.get("finish_reason")}

    for _ in range(params.max_turns):
        choice = await ctx.step("reply", ask)
        reply = str(choice["content"])
        turns += 1
        messages.append({"role": "assistant", "content": reply})
        if choice["finish_reason"] != "length":
            break
        messages.append({"role": "user", "content": "Continue."})
    return {"reply": reply, "turns": turns}


async def _complete(
    http: httpx.AsyncClient,
    url: str,
    headers: dict[str, str],
    model: str,
    messages: list[dict[str, str]],
    timeout_s: float,
) -> dict[str, Any]:
    try:
        response = await http.post(
            url, json={"model": model, "messages": messages}, headers=headers, timeout=timeout_s
        )
    except httpx.TransportError as exc:  # timeouts included
        log.warning("llm endpoint unreachable: %r", exc)  # the operator's; not the tenant's
        raise RetryableFault(f"llm endpoint unreachable ({type(exc).__name__})") from None
    if response.status_code == 429 or response.status_code >= 500:
        raise RetryableFault(f"llm endpoint answered {response.status_code}")
    if not response.is_success:
        raise LlmRejected(upstream_error(response))
    try:
        choice: dict[str, Any] = response.json()["choices"][0]
    except (ValueError, KeyError, IndexError, TypeError):
        raise LlmRejected(upstream_error(response, "an unexpected body")) from None
    return choice


def upstream_error(response: httpx.Response, what: str | None = None) -> str:
    """What a tenant reads of an upstream's refusal: its status, never its body. The body can
    carry the operator's key suffix, org id or an internal host (security review round 4, L2);
    it goes to a WARNING for the operator instead."""
    said = what or str(response.status_code)
    log.warning("llm endpoint answered %s: %s", said, response.text[:500])
    return f"llm endpoint answered {said}"


AGENT = Agent(
    name="llm",
    description="Chats with the configured OpenAI-compatible endpoint; each reply is a `message`.",
    input_model=LlmInput,
    run=run,
)
