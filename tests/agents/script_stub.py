"""A scripted OpenAI-compatible stub for the crash tests of issue 40, served on loopback in the
test process (outside the workers a test kills).

Turn k of a conversation (1 + the assistant messages in the request) answers `turns[k - 1]`:
tool calls, or text streamed a word at a time (`gap_s` apart). Every request's raw body is kept
by turn (`bodies`), so a test compares, byte for byte, what the model was sent. `hold(k)` makes
the next request of turn k wait, after sending its first `after_words` words, until
`release(k)`; its arrival (and those words' sending) sets an event: a test kills the worker then.
`delay_s` keeps every request in flight that long before it is answered.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response, StreamingResponse
from starlette.routing import Route

USAGE = {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}


@dataclass(frozen=True)
class Calls:
    """A turn that calls tools: (name, call id, arguments) each."""

    calls: tuple[tuple[str, str, dict[str, Any]], ...]


@dataclass(frozen=True)
class Says:
    """A turn that answers in words."""

    text: str


def calls(*each: tuple[str, str, dict[str, Any]]) -> Calls:
    return Calls(each)


@dataclass
class Hold:
    after_words: int
    arrived: asyncio.Event = field(default_factory=asyncio.Event)
    released: asyncio.Event = field(default_factory=asyncio.Event)


class ScriptStub:
    def __init__(self, turns: list[Calls | Says], *, gap_s: float = 0.0) -> None:
        self.turns = turns
        self.gap_s = gap_s
        self.delay_s = 0.0  # before each answer: a request is in flight that long
        self.bodies: dict[int, list[bytes]] = {}
        self.keys: list[str | None] = []  # each request's Authorization header
        self._holds: dict[int, Hold] = {}
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    @property
    def requests(self) -> int:
        return sum(len(b) for b in self.bodies.values())

    def clear(self) -> None:
        self.bodies.clear()

    def hold(self, k: int, *, after_words: int = 0) -> asyncio.Event:
        """The next request of turn k holds (after `after_words` words): set when it did."""
        self._holds[k] = Hold(after_words)
        return self._holds[k].arrived

    def release(self, k: int) -> None:
        self._holds.pop(k).released.set()

    def release_all(self) -> None:
        for hold in self._holds.values():
            hold.released.set()

    async def chat(self, request: Request) -> Response:
        raw = await request.body()
        self.keys.append(request.headers.get("authorization"))
        body = json.loads(raw)
        k = 1 + sum(m.get("role") == "assistant" for m in body["messages"])
        self.bodies.setdefault(k, []).append(raw)
        hold = self._holds.get(k)
        if hold is not None and hold.arrived.is_set():
            hold = None  # held once
        turn = self.turns[k - 1]
        return StreamingResponse(self._sse(turn, hold), media_type="text/event-stream")

    async def _sse(self, turn: Calls | Says, hold: Hold | None) -> AsyncIterator[str]:
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if isinstance(turn, Calls):
            if hold is not None:
                hold.arrived.set()
                await hold.released.wait()
            for index, (name, call_id, args) in enumerate(turn.calls):
                call = {
                    "index": index,
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": json.dumps(args)},
                }
                yield _event({"role": "assistant", "tool_calls": [call]})
            yield _event({}, "tool_calls")
        else:
            words = turn.text.split(" ")
            yield _event({"role": "assistant", "content": ""})
            for i, word in enumerate(words):
                if hold is not None and i == hold.after_words:
                    hold.arrived.set()
                    await hold.released.wait()
                yield _event({"content": word + (" " if i < len(words) - 1 else "")})
                if self.gap_s:
                    await asyncio.sleep(self.gap_s)
            yield _event({}, "stop")
        usage = {**_chunk({}), "choices": [], "usage": USAGE}
        yield f"data: {json.dumps(usage)}\n\n"
        yield "data: [DONE]\n\n"


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-script",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _event(delta: dict[str, Any], finish: str | None = None) -> str:
    return f"data: {json.dumps(_chunk(delta, finish))}\n\n"
