"""The recorded-model cassette with the `llm` agent: recorded once from an endpoint (a stub on
loopback here), then replayed without it, streamed; a request it does not hold fails the run at
once and reaches nobody."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from outlive.testing import Cassette, Harness, RunFailed, assert_usage
from tests.conftest import make_settings, with_own_database
from tests.support import Servers, loopback_server

pytestmark = pytest.mark.timeout(120)


class Endpoint:
    """The real model, as far as the cassette knows: counts what reaches it."""

    def __init__(self) -> None:
        self.asked = 0
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    async def chat(self, request: Request) -> Response:
        self.asked += 1
        body = json.loads(await request.body())
        assert "stream" not in body  # recorded unstreamed
        prompt = body["messages"][-1]["content"]
        message = {"role": "assistant", "content": f"You said: {prompt}"}
        return JSONResponse(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "created": 0,
                "model": "tiny",
                "choices": [{"index": 0, "finish_reason": "stop", "message": message}],
                "usage": {"prompt_tokens": 12, "completion_tokens": 5, "total_tokens": 17},
            }
        )


@pytest.fixture
async def recorded(servers: Servers, tmp_path: Path) -> AsyncIterator[tuple[Harness, Endpoint]]:
    own = await with_own_database(servers)
    endpoint = Endpoint()
    async with loopback_server(endpoint.app) as url:
        cassette = Cassette(tmp_path / "llm.json", upstream=url + "/v1")
        settings = make_settings(own, llm_model="tiny")
        async with Harness(settings=settings, cassette=cassette) as harness:
            yield harness, endpoint


async def test_a_cassette_records_once_then_replays_streamed_and_refuses_what_it_lacks(
    recorded: tuple[Harness, Endpoint], tmp_path: Path
) -> None:
    harness, endpoint = recorded
    cassette = harness.cassette
    assert cassette is not None
    first = await harness.start("llm", {"prompt": "hello", "stream": False})
    assert await harness.result(first) == {"reply": "You said: hello", "turns": 1}
    cassette.save()
    cassette.upstream = None  # from here on, the file only
    cassette.rewind()
    again = await harness.start("llm", {"prompt": "hello"})  # streamed this time
    assert await harness.result(again) == {"reply": "You said: hello", "turns": 1}
    other = await harness.start("llm", {"prompt": "something else", "stream": False})
    with pytest.raises(RunFailed, match="LlmRejected: llm endpoint answered 400"):
        await harness.result(other)

    assert endpoint.asked == 1
    assert [r["messages"][-1]["content"] for r in cassette.refused] == ["something else"]
    saved = json.loads((tmp_path / "llm.json").read_text())["interactions"]
    assert len(saved) == 1
    await assert_usage(harness, again, requests=1, input_tokens=12, output_tokens=5)
