"""GenAI spans from the engine: a 10-reply `llm` run whose worker is SIGKILLed twice, each time
with a reply in flight, traced by real `outlive worker` processes to a file (each span written as
it ends, `OUTLIVE_TRACES_FILE`). The spans validate against the GenAI conventions (the attribute
names and the operation and provider values of `opentelemetry-semantic-conventions`); their token
usage sums to `Run.usage`; there is exactly one `chat` span per reply bought and recorded, and
one `outlive.step.memoized` mark per reply a later attempt got back from the journal."""

from __future__ import annotations

import asyncio
import json
from collections import Counter
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.semconv._incubating.attributes import gen_ai_attributes
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from outlive.config import Settings
from outlive.db.tx import Sessions
from tests.conftest import make_settings
from tests.support import (
    Api,
    NudgeWatch,
    Servers,
    TenantHandle,
    WorkerProcesses,
    loopback_server,
    settled,
)

pytestmark = pytest.mark.timeout(150)

TURNS = 10
KILLED_AT = (4, 8)  # the replies in flight at the two SIGKILLs
GEN_AI_NAMES = {
    value for name, value in vars(gen_ai_attributes).items() if name.startswith("GEN_AI_")
}
OPERATIONS = {v.value for v in gen_ai_attributes.GenAiOperationNameValues}
PROVIDERS = {v.value for v in gen_ai_attributes.GenAiProviderNameValues}
USAGE = "query($id: ID!) { run(id: $id) { status attempt usage { inputTokens outputTokens } } }"


class Model:
    """Reply k (1 + the assistant messages sent) is cut off by the length limit until the last;
    its usage is 100 + k tokens in, k out. `hold(k)`: the first request of reply k waits for
    `release(k)`; its arrival sets the event returned."""

    def __init__(self) -> None:
        self.asked: Counter[int] = Counter()
        self.arrived: dict[int, asyncio.Event] = {}
        self.released: dict[int, asyncio.Event] = {}
        self.app = Starlette(routes=[Route("/v1/chat/completions", self.chat, methods=["POST"])])

    def hold(self, k: int) -> asyncio.Event:
        self.arrived[k], self.released[k] = asyncio.Event(), asyncio.Event()
        return self.arrived[k]

    async def chat(self, request: Request) -> Response:
        body = json.loads(await request.body())
        k = 1 + sum(m.get("role") == "assistant" for m in body["messages"])
        self.asked[k] += 1
        if k in self.arrived and self.asked[k] == 1:
            self.arrived[k].set()
            await self.released[k].wait()
        finish = "stop" if k == TURNS else "length"
        message = {"role": "assistant", "content": f"part {k}. "}
        return JSONResponse(
            {
                "id": f"chatcmpl-{k}",
                "object": "chat.completion",
                "created": 0,
                "model": "tiny",
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {
                    "prompt_tokens": 100 + k,
                    "completion_tokens": k,
                    "total_tokens": 100 + 2 * k,
                },
            }
        )


@pytest.fixture
async def model() -> AsyncIterator[tuple[Model, str]]:
    served = Model()
    async with loopback_server(served.app) as url:
        yield served, url + "/v1"
        for event in served.released.values():
            event.set()


@pytest.fixture
def settings(servers: Servers, model: tuple[Model, str]) -> Settings:
    return make_settings(servers, llm_base_url=model[1], llm_model="tiny")


@pytest.fixture
def workers(
    settings: Settings, model: tuple[Model, str], tmp_path: Path
) -> Iterator[WorkerProcesses]:
    with WorkerProcesses.of(
        settings,
        tmp_path,
        OUTLIVE_LLM_BASE_URL=model[1],
        OUTLIVE_LLM_API_KEY="sk-stub",
        OUTLIVE_LLM_MODEL="tiny",
        OUTLIVE_TRACES_FILE=str(tmp_path / "spans.jsonl"),
        OTEL_SEMCONV_STABILITY_OPT_IN="http,gen_ai_latest_experimental",
        # a kill is seen by liveness at once: a long lease only keeps a loaded machine's slow
        # heartbeat from stopping an attempt (and buying the reply in flight again)
        OUTLIVE_RUN_HEARTBEAT_S="10",
    ) as processes:
        yield processes


async def test_a_run_killed_twice_is_traced_as_genai_spans_bought_once_and_reused_at_cost_0(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    model: tuple[Model, str],
    workers: WorkerProcesses,
    tmp_path: Path,
) -> None:
    served, _ = model
    assert settings.redis_url is not None
    holds = {k: served.hold(k) for k in KILLED_AT}
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        worker = workers.start()
        input_ = {"prompt": "Tell me a long story", "maxTurns": TURNS, "stream": False}
        run_id = (await api.start_run(tenant.token, "llm", input_))["run"]["id"]
        for k in KILLED_AT:
            await asyncio.wait_for(holds[k].wait(), 60)
            await workers.kill(worker)  # reply k in flight: never recorded, asked again
            served.released[k].set()
            worker = workers.start()
        await watch.until(run_id, settled, timeout=90)
    run = (await api.gql(USAGE, {"id": run_id}, token=tenant.token))["run"]
    spans = [json.loads(line) for line in (tmp_path / "spans.jsonl").read_text().splitlines()]

    assert run["status"] == "SUCCEEDED"
    assert served.asked == {k: 2 if k in KILLED_AT else 1 for k in range(1, TURNS + 1)}
    genai = [s for s in spans if "gen_ai.operation.name" in s["attributes"]]
    for span in genai:
        _valid(span, run_id)
    chats = [s for s in genai if s["attributes"]["gen_ai.operation.name"] == "chat"]
    reused = [s for s in chats if s["attributes"]["outlive.step.memoized"]]
    recorded = [s for s in chats if s not in reused and "gen_ai.usage.input_tokens" in _at(s)]
    # one span per reply bought and recorded (the two in flight at a kill died with their worker;
    # a step cut by its attempt losing the run, on a loaded machine, ends as an error, unpaid)
    assert sorted(_at(s)["outlive.step.occurrence"] for s in recorded) == list(range(1, TURNS + 1))
    # one memoized mark per reply reused, per attempt: each got back the replies recorded before
    # it, once each (3 after the first kill, 7 after the second)
    by_attempt: dict[str, list[int]] = {}
    for span in reused:  # grouped by their attempt's invoke_agent span
        by_attempt.setdefault(span["parent_id"], []).append(_at(span)["outlive.step.occurrence"])
    assert all(sorted(o) == list(range(1, len(o) + 1)) for o in by_attempt.values()), by_attempt
    sizes = sorted(len(o) for o in by_attempt.values())
    assert KILLED_AT[0] - 1 in sizes
    assert KILLED_AT[1] - 1 in sizes
    assert all(_at(s)["gen_ai.usage.input_tokens"] == 0 for s in reused)
    assert all(_at(s)["outlive.step.cost_usd"] == 0 for s in reused)
    total_in = sum(_at(s).get("gen_ai.usage.input_tokens", 0) for s in chats)
    total_out = sum(_at(s).get("gen_ai.usage.output_tokens", 0) for s in chats)
    assert (total_in, total_out) == (run["usage"]["inputTokens"], run["usage"]["outputTokens"])
    assert total_out == sum(range(1, TURNS + 1))
    # the attempts killed never ended their invoke_agent span; the last one did, with its steps
    agents = [s for s in genai if _at(s)["gen_ai.operation.name"] == "invoke_agent"]
    (agent,) = [s for s in agents if s["status"]["status_code"] == "UNSET"]
    assert agent["name"] == "invoke_agent llm"
    assert _at(agent)["outlive.attempt"] == run["attempt"]
    assert _at(agent)["gen_ai.agent.name"] == "llm"
    last = [s for s in chats if s["parent_id"] == agent["context"]["span_id"]]
    assert len(last) == TURNS


def _at(span: dict[str, Any]) -> dict[str, Any]:
    attributes: dict[str, Any] = span["attributes"]
    return attributes


def _valid(span: dict[str, Any], run_id: str) -> None:
    """The GenAI conventions' names and values, the span name `{operation} {target}`."""
    attributes = span["attributes"]
    unknown = {a for a in attributes if a.startswith("gen_ai.")} - GEN_AI_NAMES
    assert not unknown, (span["name"], unknown)
    operation = attributes["gen_ai.operation.name"]
    assert operation in OPERATIONS
    assert attributes["gen_ai.conversation.id"] == run_id  # the run has no key: its id
    if span["status"]["status_code"] != "UNSET":  # an attempt that lost the run, say
        assert "error.type" in attributes, span
    target = {
        "chat": "gen_ai.request.model",
        "invoke_agent": "gen_ai.agent.name",
        "execute_tool": "gen_ai.tool.name",
        "invoke_workflow": "gen_ai.workflow.name",
    }[operation]
    assert span["name"] == f"{operation} {attributes[target]}"
    if operation == "chat":
        assert span["kind"] == "SpanKind.CLIENT"
        assert attributes["gen_ai.provider.name"] in PROVIDERS
        assert attributes["gen_ai.request.model"] == "tiny"
        assert isinstance(attributes["gen_ai.usage.input_tokens"], int)
        assert isinstance(attributes["gen_ai.usage.output_tokens"], int)
