"""A recorded-model cassette: an OpenAI-compatible chat endpoint on loopback that answers from a
file, for the `llm` agent and pydantic-ai agents on `openai_compatible` (the harness points
`OUTLIVE_LLM_BASE_URL` at it).

The file is JSON: `{"interactions": [{"request": {...}, "response": {...}}, ...]}`, each request
the body the agent sent (without `stream` and `stream_options`), each response a whole
`chat.completion` object. A request is answered by the first interaction not used yet whose
request is equal; a request the cassette does not hold is refused with a 400 (the run fails at
once: `LlmRejected`), never sent anywhere, and kept in `refused` (and logged) for the test to
see. A request asking for a stream gets the recorded response as server-sent events (its text in
one chunk, its tool calls, its usage).

Recording: `Cassette(path, upstream="https://api.openai.com/v1", api_key=…)` forwards each request
not held (unstreamed) to `upstream`, keeps the answer, and writes the file when the harness
closes. Commit the file; replays then need no network and no key.
"""

from __future__ import annotations

import asyncio
import json
import logging
import socket
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

log = logging.getLogger(__name__)

UNSENT = ("stream", "stream_options")


class Cassette:
    def __init__(
        self, path: Path | str, *, upstream: str | None = None, api_key: str | None = None
    ) -> None:
        self.path = Path(path)
        self.upstream = upstream
        self._key = api_key
        self.interactions: list[dict[str, Any]] = []
        if self.path.is_file():
            self.interactions = json.loads(self.path.read_text())["interactions"]
        self._used: set[int] = set()
        self.refused: list[dict[str, Any]] = []  # the requests it did not hold, as sent
        self.requests = 0  # answered, from the file or upstream
        self.app = Starlette(routes=[Route("/v1/chat/completions", self._chat, methods=["POST"])])

    async def _chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        asked = {k: v for k, v in body.items() if k not in UNSENT}
        response = self._replay(asked)
        if response is None and self.upstream is not None:
            response = await self._record(asked)
        if response is None:  # the run fails on the 400 (`LlmRejected`, which shows no body)
            self.refused.append(asked)
            shown = json.dumps(asked)[:2000]
            message = f"this request is not in the cassette {self.path.name}: {shown}"
            log.warning("%s", message)
            return JSONResponse({"error": {"message": message}}, status_code=400)
        self.requests += 1
        if body.get("stream"):
            return StreamingResponse(_sse(response), media_type="text/event-stream")
        return JSONResponse(response)

    def _replay(self, asked: dict[str, Any]) -> dict[str, Any] | None:
        for index, interaction in enumerate(self.interactions):
            if index not in self._used and interaction["request"] == asked:
                self._used.add(index)
                response: dict[str, Any] = interaction["response"]
                return response
        return None

    async def _record(self, asked: dict[str, Any]) -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        async with httpx.AsyncClient(timeout=120) as client:
            answer = await client.post(
                f"{self.upstream}/chat/completions", json=asked, headers=headers
            )
        answer.raise_for_status()
        response: dict[str, Any] = answer.json()
        self.interactions.append({"request": asked, "response": response})
        self._used.add(len(self.interactions) - 1)
        return response

    def rewind(self) -> None:
        """Answer from the first interaction again (a new test replaying the same file)."""
        self._used.clear()

    def save(self) -> None:
        """Write what was recorded (nothing when nothing was)."""
        if self.upstream is not None:
            text = json.dumps({"interactions": self.interactions}, indent=1) + "\n"
            self.path.write_text(text)

    @asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Served on 127.0.0.1 (a free port) while open: yields the base URL (`…/v1`)."""
        import uvicorn

        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        server = uvicorn.Server(uvicorn.Config(self.app, log_level="warning", lifespan="off"))
        task = asyncio.create_task(server.serve(sockets=[sock]))
        try:
            yield f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        finally:
            server.should_exit = True
            await task
            sock.close()
            self.save()


async def _sse(response: dict[str, Any]) -> AsyncIterator[str]:
    choice = response["choices"][0]
    message = choice.get("message") or {}
    base = {k: response.get(k) for k in ("id", "created", "model")}
    base["object"] = "chat.completion.chunk"

    def chunk(delta: dict[str, Any], finish: str | None = None) -> str:
        one = {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        return f"data: {json.dumps(one)}\n\n"

    yield chunk({"role": "assistant", "content": message.get("content") or ""})
    for index, call in enumerate(message.get("tool_calls") or []):
        yield chunk({"tool_calls": [{"index": index, **call}]})
    yield chunk({}, choice.get("finish_reason") or "stop")
    if response.get("usage") is not None:
        yield f"data: {json.dumps({**base, 'choices': [], 'usage': response['usage']})}\n\n"
    yield "data: [DONE]\n\n"
