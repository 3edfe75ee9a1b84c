"""A small OpenAI-compatible server (chat completions, streamed as server-sent events) and the
shop API of `examples.support`, for tests that run that agent over real HTTP on loopback.

The model's script follows the conversation: no tool result yet: call `lookup_order`; one:
call `refund`; two: answer in words. Every request is counted here, in the test process (outside
the worker that a test kills). `hold(kind)` makes the first request of a kind wait until
`release(kind)`: a test kills the worker while that request is in flight."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

REPLY = "Refunded 42.00 for order A-1. Anything else?"


class Stub:
    def __init__(self) -> None:
        self.counts: Counter[str] = Counter()  # chat.1, chat.2, chat.3, lookup, refund
        self.arrived: dict[str, asyncio.Event] = {}
        self._held: dict[str, asyncio.Event] = {}
        self.app = Starlette(
            routes=[
                Route("/v1/chat/completions", self.chat, methods=["POST"]),
                Route("/orders/{order_id}", self.order, methods=["GET"]),
                Route("/refunds", self.refund, methods=["POST"]),
            ]
        )

    def hold(self, kind: str) -> asyncio.Event:
        """The first request of `kind` waits for `release(kind)`; the event is set on arrival."""
        self._held[kind] = asyncio.Event()
        self.arrived[kind] = asyncio.Event()
        return self.arrived[kind]

    def release(self, kind: str) -> None:
        self._held.pop(kind).set()

    def release_all(self) -> None:
        for event in self._held.values():
            event.set()

    async def _count(self, kind: str) -> None:
        self.counts[kind] += 1
        if kind in self.arrived:
            self.arrived[kind].set()
        if self.counts[kind] == 1 and kind in self._held:
            await self._held[kind].wait()

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        results = sum(m.get("role") == "tool" for m in body["messages"])
        await self._count(f"chat.{results + 1}")
        if results == 0:
            parts = _tool_call("lookup_order", {"order_id": "A-1"}, "call_1")
        elif results == 1:
            parts = _tool_call("refund", {"order_id": "A-1", "amount": 42.0}, "call_2")
        else:
            parts = _text(REPLY)
        if not body.get("stream"):
            return JSONResponse(_whole(parts))
        return StreamingResponse(_sse(parts), media_type="text/event-stream")

    async def order(self, request: Request) -> Response:
        await self._count("lookup")
        order_id = request.path_params["order_id"]
        return JSONResponse({"id": order_id, "total": 42.0, "status": "delivered"})

    async def refund(self, request: Request) -> Response:
        await self._count("refund")
        body = json.loads(await request.body())
        return JSONResponse({"refunded": body["amount"], "orderId": body["orderId"]})


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": "stub",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _tool_call(name: str, args: dict[str, Any], call_id: str) -> list[dict[str, Any]]:
    call = {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": json.dumps(args)},
    }
    return [
        _chunk({"role": "assistant", "tool_calls": [call]}),
        _chunk({}, "tool_calls"),
    ]


def _text(text: str) -> list[dict[str, Any]]:
    words = text.split(" ")
    chunks = [_chunk({"role": "assistant", "content": ""})]
    chunks += [
        _chunk({"content": w + (" " if i < len(words) - 1 else "")}) for i, w in enumerate(words)
    ]
    return [*chunks, _chunk({}, "stop")]


async def _sse(chunks: list[dict[str, Any]]) -> AsyncIterator[str]:
    for chunk in chunks:
        yield f"data: {json.dumps(chunk)}\n\n"
    usage = {
        **_chunk({}),
        "choices": [],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
    yield f"data: {json.dumps(usage)}\n\n"
    yield "data: [DONE]\n\n"


def _whole(chunks: list[dict[str, Any]]) -> dict[str, Any]:
    content = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    calls = [t for c in chunks for t in c["choices"][0]["delta"].get("tool_calls") or []]
    message: dict[str, Any] = {"role": "assistant", "content": content or None}
    if calls:
        message["tool_calls"] = [{k: v for k, v in t.items() if k != "index"} for t in calls]
    return {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": 0,
        "model": "stub",
        "choices": [
            {"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}
        ],
        "usage": {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18},
    }
