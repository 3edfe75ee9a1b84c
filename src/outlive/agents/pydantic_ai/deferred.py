"""Deferred tool calls answered by signals, each bound to its call.

pydantic-ai ends a run with `DeferredToolRequests` when a tool call needs a person's approval
(`requires_approval=True`, or `ApprovalRequired` raised by the tool) or is executed outside the
agent (`CallDeferred`). `durable()` answers each call with a durable wait of its own:

- its wait id is derived from the call's `tool_call_id` (`call-<tool_call_id>`), so a decision
  names the call it decides, and `Run.waitingShow` shows the tool and its arguments;
- only a signal bound to that wait answers it (`signalRun(waitId:)`): an approval sent without
  one is refused, and none is taken from the mailbox (round five, F1: a double-clicked unbound
  approval approved a later refund of 900.00 that nobody had seen);
- the payloads are declared (`Approval`, `ToolResult`) and checked at `signalRun`: a malformed
  one is refused there (`BAD_USER_INPUT`, nothing kept) and the run keeps waiting (F2).

An approval answers `True` (`ToolApproved`) or `ToolDenied(reason)`, which the model reads; a
deferred call's result is its `result`, or its `error` as a `ModelRetry` the model reads.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from typing import Any

from pydantic import BaseModel, ConfigDict, JsonValue
from pydantic_ai import DeferredToolRequests, DeferredToolResults, ToolDenied
from pydantic_ai.exceptions import ModelRetry
from pydantic_ai.messages import ToolCallPart

from outlive.agents.pydantic_ai.parts import call_args
from outlive.agents.registry import RunContext, Signal

APPROVAL = "approval"  # the signal that answers a tool call waiting for approval
TOOL_RESULT = "tool_result"  # the signal that answers a call executed outside the agent
WAIT_PREFIX = "call-"
MAX_CALL_ID = 150  # longer tool call ids are shortened to a digest in the wait id


class Approval(BaseModel):
    """The payload of the signal `approval`: `{"approved": true}`, or `{"approved": false,
    "reason": "..."}` (the model reads the reason)."""

    model_config = ConfigDict(extra="forbid")

    approved: bool
    reason: str | None = None


class ToolResult(BaseModel):
    """The payload of the signal `tool_result`: the deferred call's `result` (any JSON), or an
    `error` the model reads (and may call again)."""

    model_config = ConfigDict(extra="forbid")

    result: JsonValue = None
    error: str | None = None


SIGNALS = {APPROVAL: Signal(Approval, bound=True), TOOL_RESULT: Signal(ToolResult, bound=True)}


class CallWaits:
    """The wait ids of one attempt's deferred calls, in program order: `call-<tool_call_id>`,
    and `call-<id>-<n>` for the n-th call of an id seen before in the run (a provider that
    numbers its calls from 1 in every response). The same on every attempt."""

    def __init__(self) -> None:
        self._seen: Counter[str] = Counter()

    def next(self, tool_call_id: str) -> str:
        name = tool_call_id
        if len(name) > MAX_CALL_ID:
            name = hashlib.sha256(name.encode()).hexdigest()[:32]
        self._seen[name] += 1
        seen = self._seen[name]
        return f"{WAIT_PREFIX}{name}" if seen == 1 else f"{WAIT_PREFIX}{name}-{seen}"


def shown(call: ToolCallPart) -> dict[str, Any]:
    """What a deferred call's wait shows the person who answers (`Run.waitingShow`)."""
    return {"tool": call.tool_name, "args": call_args(call), "toolCallId": call.tool_call_id}


async def answer(
    ctx: RunContext, requests: DeferredToolRequests, waits: CallWaits
) -> DeferredToolResults:
    """Wait for each deferred call's signal, bound to its call, in the order of the calls."""
    results = DeferredToolResults()
    for call in requests.approvals:
        payload = await ctx.wait_for(
            APPROVAL, wait_id=waits.next(call.tool_call_id), show=shown(call)
        )
        decision = Approval.model_validate(payload)
        results.approvals[call.tool_call_id] = (
            True
            if decision.approved
            else ToolDenied(decision.reason or "The tool call was not approved.")
        )
    for call in requests.calls:
        payload = await ctx.wait_for(
            TOOL_RESULT, wait_id=waits.next(call.tool_call_id), show=shown(call)
        )
        done = ToolResult.model_validate(payload)
        results.calls[call.tool_call_id] = (
            ModelRetry(done.error) if done.error is not None else done.result
        )
    return results
