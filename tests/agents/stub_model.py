"""A local OpenAI-compatible stub on loopback: counts requests (and when each arrived), answers
scripted faults (429 with `Retry-After`, 500, slow replies) and otherwise a conversation of
`turns` replies, `reply #k` with `finish_reason` "length" until the last, with `usage`; as
server-sent events (a delta per word) when the request asks for `stream`."""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route


@dataclass
class Answer:
    status: int = 200
    content: str | None = None  # None: the conversation's next reply
    finish: str | None = None
    retry_after: float | None = None
    delay_s: float = 0.0


def usage_of(k: int) -> dict[str, int]:
    """The stub's `usage` for reply #k: easy to sum exactly."""
    return {"prompt_tokens": 100 + k, "completion_tokens": 10 * k, "total_tokens": 100 + 11 * k}


@dataclass
class StubModel:
    turns: int = 1
    script: dict[int, Answer] = field(default_factory=dict)  # by request number, from 1
    requests: list[dict[str, Any]] = field(default_factory=list)
    arrivals: list[float] = field(default_factory=list)  # time.monotonic() of each request
    headers: list[str | None] = field(default_factory=list)
    arrived: asyncio.Condition = field(default_factory=asyncio.Condition)
    # the usage a request reports (default: `usage_of(k)`); a test may make some huge
    usage: Callable[[dict[str, Any], int], dict[str, int]] = lambda _body, k: usage_of(k)

    async def complete(self, request: Request) -> Response:
        body = json.loads(await request.body())
        async with self.arrived:
            self.requests.append(body)
            self.arrivals.append(time.monotonic())
            self.headers.append(request.headers.get("authorization"))
            number = len(self.requests)
            self.arrived.notify_all()
        answer = self.script.get(number, Answer())
        if answer.delay_s:
            await asyncio.sleep(answer.delay_s)
        if answer.status != 200:
            headers = {}
            if answer.retry_after is not None:
                headers["Retry-After"] = f"{answer.retry_after:g}"
            return JSONResponse(
                {"error": {"message": "secret-account-detail: quota of org-123 exceeded"}},
                status_code=answer.status,
                headers=headers,
            )
        k = 1 + sum(m["role"] == "assistant" for m in body["messages"])
        content = answer.content if answer.content is not None else f"reply #{k}."
        finish = answer.finish or ("length" if k < self.turns else "stop")
        if body.get("stream"):
            return StreamingResponse(
                _events(content, finish, self.usage(body, k), body),
                media_type="text/event-stream",
            )
        return JSONResponse(
            {
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": {"role": "assistant", "content": content},
                    }
                ],
                "usage": self.usage(body, k),
            }
        )

    async def wait_for_requests(self, count: int, timeout: float = 30) -> None:
        async with asyncio.timeout(timeout), self.arrived:
            await self.arrived.wait_for(lambda: len(self.requests) >= count)


async def _events(
    content: str, finish: str, usage: dict[str, int], body: dict[str, Any]
) -> AsyncIterator[str]:
    """The reply as OpenAI's server-sent events: a delta per word, the finish reason, then the
    usage when `stream_options.include_usage` asks for it, and `[DONE]`."""
    words = content.split(" ")
    for i, word in enumerate(words):
        delta = {"content": word if i == 0 else " " + word}
        yield _event({"choices": [{"index": 0, "delta": delta, "finish_reason": None}]})
    yield _event({"choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if (body.get("stream_options") or {}).get("include_usage"):
        yield _event({"choices": [], "usage": usage})
    yield "data: [DONE]\n\n"


def _event(chunk: dict[str, Any]) -> str:
    return f"data: {json.dumps(chunk)}\n\n"


@asynccontextmanager
async def serve(stub: StubModel) -> AsyncIterator[str]:
    """The stub on 127.0.0.1:<free port>; yields its base URL (ending in /v1)."""
    app = Starlette(routes=[Route("/v1/chat/completions", stub.complete, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning", lifespan="off"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        server.should_exit = True
        server.force_exit = True
        await task
