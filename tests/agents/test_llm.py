"""The `llm` agent against a small OpenAI-compatible server on loopback."""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import pytest
import uvicorn
from redis.asyncio import Redis
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.realtime.outputs import OutputStore
from outlive.services import runs as runs_service
from outlive.worker import WorkerHost
from tests.agents.stub_model import StubModel, serve
from tests.conftest import make_settings
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle, settled


@dataclass
class FakeModel:
    """Answers scripted replies in order: (status, content, finish_reason)."""

    script: list[tuple[int, str, str]] = field(default_factory=list)
    requests: list[dict[str, Any]] = field(default_factory=list)
    headers: list[str | None] = field(default_factory=list)

    async def complete(self, request: Request) -> Response:
        self.requests.append(json.loads(await request.body()))
        self.headers.append(request.headers.get("authorization"))
        status, content, finish = self.script.pop(0) if self.script else (200, "done", "stop")
        if status != 200:
            return JSONResponse({"error": {"message": content}}, status_code=status)
        return JSONResponse(
            {
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": finish,
                        "message": {"role": "assistant", "content": content},
                    }
                ]
            }
        )


@pytest.fixture
async def model() -> AsyncIterator[tuple[FakeModel, str]]:
    fake = FakeModel()
    app = Starlette(routes=[Route("/v1/chat/completions", fake.complete, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen()  # connections wait in the backlog until uvicorn accepts them
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    task = asyncio.create_task(server.serve(sockets=[sock]))
    yield fake, f"http://127.0.0.1:{port}/v1"
    server.should_exit = True
    await task


@pytest.fixture
def settings(servers: Any, model: tuple[FakeModel, str]) -> Settings:
    """The API's and the worker's (the API checks a run's model against its list at start)."""
    return make_settings(
        servers,
        llm_base_url=model[1],
        llm_api_key="sk-test",
        llm_model="tiny",
        llm_models=["small", "large"],
        llm_retry_backoff_s=0.01,
        run_retry_delay_s=0.05,
    )


@pytest.fixture
async def llm_settings(settings: Settings) -> AsyncIterator[Settings]:
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    yield settings
    await host.stop()


async def _run(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle, input: dict[str, Any]
) -> tuple[Any, list[Any]]:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "llm", input)
        run = await watch.until(started["run"]["id"], settled)
    return run, await runs_service.list_events(sessions, run.id)


async def test_each_reply_is_a_message_event_and_a_cut_reply_is_continued(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    fake, _ = model
    fake.script = [(200, "Once upon", "length"), (200, " a time.", "stop")]
    input = {"prompt": "Tell a story", "maxTurns": 3, "stream": False}
    run, events = await _run(api, llm_settings, sessions, tenant, input)
    assert run.status == "SUCCEEDED"
    assert run.output == {"reply": "Once upon a time.", "turns": 2}  # the whole answer
    assert [e.data["content"] for e in events if e.type == "message"] == ["Once upon", " a time."]
    assert fake.requests[0] == {
        "model": "tiny",
        "stream": False,  # the openai SDK says so (OpenAI's default)
        "messages": [{"role": "user", "content": "Tell a story"}],
    }
    assert fake.requests[1]["messages"][1] == {"role": "assistant", "content": "Once upon"}
    assert fake.headers[0] == "Bearer sk-test"


async def test_429_and_5xx_are_retried_inside_the_call(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    fake, _ = model
    fake.script = [(429, "slow down", ""), (503, "busy", ""), (200, "hello", "stop")]
    run, events = await _run(api, llm_settings, sessions, tenant, {"prompt": "hi"})
    assert run.status == "SUCCEEDED"
    assert run.attempt == 1  # the call's own retries; the run's are untouched
    assert len(fake.requests) == 3
    retrying = [e.data for e in events if e.type == "retrying"]  # inside the step: a trace each
    assert [(r["step"], r["call"], r["status"]) for r in retrying] == [
        ("reply", 1, 429),
        ("reply", 2, 503),
    ]
    assert not any("delayS" in r for r in retrying)  # none of the run's own retries


async def test_a_system_prompt_and_an_allowed_model_are_sent(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    fake, _ = model
    input = {"prompt": "hi", "system": "Be brief.", "model": "large", "stream": False}
    run, _ = await _run(api, llm_settings, sessions, tenant, input)
    assert run.status == "SUCCEEDED"
    assert fake.requests[0] == {
        "model": "large",
        "stream": False,
        "messages": [
            {"role": "system", "content": "Be brief."},
            {"role": "user", "content": "hi"},
        ],
    }
    with pytest.raises(GraphQLError) as refused:  # refused at start, nothing written
        await api.start_run(tenant.token, "llm", {"prompt": "hi", "model": "x"})
    assert refused.value.codes == ["BAD_USER_INPUT"]
    assert "not allowed" in str(refused.value)
    assert len(fake.requests) == 1  # a model not allowed is never asked


async def test_a_4xx_fails_the_run_at_once(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    fake, _ = model
    fake.script = [(400, "Incorrect API key provided: sk-live-****Zq9X (org org-Internal)", "")]
    run, events = await _run(api, llm_settings, sessions, tenant, {"prompt": "hi"})
    assert run.status == "FAILED"
    assert run.attempt == 1
    assert run.error == "LlmRejected: llm endpoint answered 400"  # not the endpoint's body
    # Round 4, L2: the upstream's own words (the operator's key suffix, org id) stay out of
    # what the tenant reads: the run's error and its timeline.
    assert not [e for e in events if "sk-live" in str(e.data)]


async def test_an_unreachable_endpoint_is_a_retryable_fault(
    api: Api, servers: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()  # nothing listens here
    settings = make_settings(
        servers,
        llm_base_url=f"http://127.0.0.1:{port}/v1",
        llm_retry_backoff_s=0.01,
        run_retry_delay_s=0.05,
    )
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    try:
        run, _ = await _run(api, settings, sessions, tenant, {"prompt": "hi"})
    finally:
        await host.stop()
    assert run.status == "FAILED"
    assert run.attempt == 3
    assert "unreachable" in (run.error or "")


async def test_a_retry_mid_conversation_does_not_pay_for_the_earlier_replies_again(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    fake, _ = model
    # Five 503s use up the call's own retries: the run's retry takes over.
    fake.script = [(200, "Once upon", "length"), *[(503, "busy", "")] * 5, (200, " a time.", "")]
    run, events = await _run(
        api, llm_settings, sessions, tenant, {"prompt": "Tell a story", "maxTurns": 3}
    )
    assert run.status == "SUCCEEDED"
    assert run.attempt == 2
    assert run.output == {"reply": "Once upon a time.", "turns": 2}
    assert len(fake.requests) == 7  # the first reply was not asked for again
    assert fake.requests[6]["messages"][1] == {"role": "assistant", "content": "Once upon"}
    assert [e.data["content"] for e in events if e.type == "message"] == ["Once upon", " a time."]
    assert [e.data for e in events if e.type == "step"] == [
        {"name": "reply", "occurrence": 1},
        {"name": "reply", "occurrence": 2},
    ]


async def test_a_streamed_reply_goes_to_the_stream_answer_and_the_step_records_it_whole(
    api: Api, servers: Any, sessions: Sessions, tenant: TenantHandle
) -> None:
    """`stream` (the default): the endpoint is asked for server-sent events with usage, each
    delta goes to the run's stream `answer` (a stream per reply, ended with its step), and the
    step records the whole reply and its usage as without streaming."""
    stub = StubModel(turns=2)
    async with serve(stub) as url:
        settings = make_settings(servers, llm_base_url=url, llm_model="tiny")
        host = WorkerHost(settings, concurrency=2)
        await host.start()
        try:
            input = {"prompt": "Tell a story", "maxTurns": 3}
            run, events = await _run(api, settings, sessions, tenant, input)
        finally:
            await host.stop()
    assert run.status == "SUCCEEDED", run.error
    assert run.output == {"reply": "reply #1.reply #2.", "turns": 2}
    assert stub.requests[0]["stream"] is True
    assert stub.requests[0]["stream_options"] == {"include_usage": True}
    assert [e.data["content"] for e in events if e.type == "message"] == ["reply #1.", "reply #2."]
    assert settings.redis_url is not None
    redis = Redis.from_url(settings.redis_url)
    try:
        chunks = await OutputStore.of(redis, settings).read_after(run.id, None)
    finally:
        await redis.aclose()
    assert {c.stream for c in chunks} == {"answer"}
    assert "".join(c.text for c in chunks) == "reply #1.reply #2."
    assert sum(c.done for c in chunks) == 2  # one stream per reply, each ended with its step
    usage = await api.gql(
        "query($id: ID!) { run(id: $id) { usage { inputTokens outputTokens } } }",
        {"id": str(run.id)},
        token=tenant.token,
    )
    assert usage["run"]["usage"] == {"inputTokens": 101 + 102, "outputTokens": 10 + 20}


async def test_an_empty_reply_is_an_answer_and_is_not_asked_for_again(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    fake, _ = model
    fake.script = [(200, "", "stop")]
    run, events = await _run(api, llm_settings, sessions, tenant, {"prompt": "hi"})
    assert run.status == "SUCCEEDED", run.error
    assert run.output == {"reply": "", "turns": 1}
    assert len(fake.requests) == 1
    assert [e.data["content"] for e in events if e.type == "message"] == [""]


BUDGET = (
    "mutation($l: Int!) { setBudget(input: {scope: TENANT, period: DAY, limitTokens: $l}) { id } }"
)


async def test_a_call_reserves_its_prompt_and_output_cap_and_waits_for_the_budget_before_it_is_made(
    api: Api,
    llm_settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[FakeModel, str],
) -> None:
    """Contract §6, round five: `llm` reserves the prompt's tokens plus the output cap before a
    call; a budget that cannot hold them holds the run WAITING `budget` and the endpoint is never
    asked, until the limit is raised."""
    fake, _ = model
    cap = llm_settings.llm_max_output_tokens
    await api.gql(BUDGET, {"l": cap}, token=tenant.token)  # less than a prompt and its cap
    assert llm_settings.redis_url is not None
    async with NudgeWatch(llm_settings.redis_url, sessions, tenant.id) as watch:
        started = await api.start_run(tenant.token, "llm", {"prompt": "Hi", "stream": False})
        run_id = started["run"]["id"]
        held = await watch.until(run_id, lambda r: r.status == "WAITING")
        assert held.waiting_for == "budget"
        assert fake.requests == []  # held before the call: nothing bought
        await api.gql(BUDGET, {"l": cap + 1000}, token=tenant.token)  # raised: room now
        done = await watch.until(run_id, settled)
    assert done.status == "SUCCEEDED"
    assert len(fake.requests) == 1
