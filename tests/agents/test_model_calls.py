"""Model calls done right (issue 29), with the `llm` agent against a local OpenAI-compatible stub:
per-call retries with `Retry-After`, a cancel that interrupts the reply in flight, a retry that
reuses the failed run's steps, and usage counted exactly."""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.services import runs as runs_service
from outlive.worker import WorkerHost
from tests.agents.stub_model import Answer, StubModel, serve, usage_of
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled

pytestmark = pytest.mark.timeout(90)

USAGE = "usage { requests inputTokens outputTokens costUsd unpricedModels abandonedRequests }"


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubModel, str]]:
    model = StubModel(turns=8)
    async with serve(model) as url:
        yield model, url


@pytest.fixture
def settings(servers: Servers, stub: tuple[StubModel, str]) -> Settings:
    return make_settings(
        servers,
        llm_base_url=stub[1],
        llm_model="tiny",
        llm_retry_backoff_s=0.05,
        run_retry_delay_s=0.05,
    )


@pytest.fixture
async def worker(settings: Settings) -> AsyncIterator[WorkerHost]:
    host = WorkerHost(settings, concurrency=2)
    await host.start()
    yield host
    await host.stop()


async def _settled(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle, run_id: str
) -> runs_service.RunRecord:
    assert settings.redis_url is not None
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
        return await watch.until(run_id, settled, timeout=60)


async def _usage(api: Api, tenant: TenantHandle, run_id: str) -> dict[str, Any]:
    data = await api.gql(
        f"query($id: ID!) {{ run(id: $id) {{ retriesLeft {USAGE} }} }}",
        {"id": run_id},
        token=tenant.token,
    )
    found: dict[str, Any] = data["run"]
    return found


async def _step_usages(api: Api, tenant: TenantHandle, run_id: str) -> list[Any]:
    data = await api.gql(
        "query($id: ID!) { run(id: $id) { steps {"
        " usage { requests inputTokens outputTokens model costUsd } } } }",
        {"id": run_id},
        token=tenant.token,
    )
    return [step["usage"] for step in data["run"]["steps"]]


def _expected_usage(replies: range) -> dict[str, Any]:
    return {
        "requests": len(replies),
        "inputTokens": sum(usage_of(k)["prompt_tokens"] for k in replies),
        "outputTokens": sum(usage_of(k)["completion_tokens"] for k in replies),
        "costUsd": None,  # "tiny" is in no price table
        "unpricedModels": ["tiny"],
        "abandonedRequests": 0,
    }


async def test_three_scattered_429s_are_retried_in_the_call_honouring_retry_after(
    api: Api,
    settings: Settings,
    worker: WorkerHost,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[StubModel, str],
) -> None:
    model, _ = stub
    for number in (2, 5, 8):  # the 2nd, 4th and 6th replies each meet one 429 first
        model.script[number] = Answer(status=429, retry_after=1)
    started = await api.start_run(tenant.token, "llm", {"prompt": "story", "maxTurns": 8})
    run = await _settled(api, settings, sessions, tenant, started["run"]["id"])
    assert run.status == "SUCCEEDED", run.error
    assert len(model.requests) == 11
    assert run.attempt == 1  # no retry of the run: each call retried itself
    for number in (2, 5, 8):  # the next call came no sooner than Retry-After said
        assert model.arrivals[number] - model.arrivals[number - 1] >= 1.0
    assert run.output == {"reply": "".join(f"reply #{k}." for k in range(1, 9)), "turns": 8}
    read = await _usage(api, tenant, started["run"]["id"])
    assert read["usage"] == _expected_usage(range(1, 9))  # a 429 is not billed: not abandoned
    assert read["retriesLeft"] == 2
    events = await runs_service.list_events(sessions, run.id)
    retrying = [e.data for e in events if e.type == "retrying"]  # issue 40: each one seen
    assert [(r["status"], r["waitS"]) for r in retrying] == [(429, 1.0)] * 3


async def test_a_cancel_interrupts_the_last_reply_and_records_nothing_of_it(
    api: Api,
    settings: Settings,
    worker: WorkerHost,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[StubModel, str],
) -> None:
    model, _ = stub
    model.turns = 2
    model.script[2] = Answer(delay_s=10)
    started = await api.start_run(tenant.token, "llm", {"prompt": "story", "maxTurns": 2})
    run_id = started["run"]["id"]
    await model.wait_for_requests(2)
    asked = time.monotonic()
    await api.cancel(tenant.token, run_id)
    run = await _settled(api, settings, sessions, tenant, run_id)
    took = time.monotonic() - asked
    assert run.status == "CANCELLED"
    assert took < 1.5, f"the cancel took {took:.2f}s"
    events = await runs_service.list_events(sessions, run.id)
    assert [e.data["occurrence"] for e in events if e.type == "step"] == [1]
    assert [e.data["content"] for e in events if e.type == "message"] == ["reply #1."]
    assert len(model.requests) == 2
    read = await _usage(api, tenant, run_id)  # issue 40: the reply cut off was billed
    assert read["usage"]["requests"] == 1
    assert read["usage"]["abandonedRequests"] == 1


async def test_retry_with_reused_steps_asks_only_for_the_replies_not_recorded(
    api: Api,
    settings: Settings,
    worker: WorkerHost,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[StubModel, str],
) -> None:
    model, _ = stub
    model.script[6] = Answer(status=400)  # reply 6 fails the run at once
    started = await api.start_run(tenant.token, "llm", {"prompt": "story", "maxTurns": 8})
    failed = await _settled(api, settings, sessions, tenant, started["run"]["id"])
    assert failed.status == "FAILED"
    assert failed.error == "LlmRejected: llm endpoint answered 400"  # no upstream body (L2)
    assert len(model.requests) == 6
    data = await api.gql(
        "mutation($id: ID!) { retryRun(id: $id, reuseSteps: true) { created run { id } } }",
        {"id": started["run"]["id"]},
        token=tenant.token,
    )
    retried_id = data["retryRun"]["run"]["id"]
    run = await _settled(api, settings, sessions, tenant, retried_id)
    assert run.status == "SUCCEEDED", run.error
    assert len(model.requests) == 9  # replies 6, 7 and 8 only
    resumed = model.requests[6]["messages"]  # the old run's five replies, in order
    assert [m["content"] for m in resumed if m["role"] == "assistant"] == [
        f"reply #{k}." for k in range(1, 6)
    ]
    assert run.output == {"reply": "".join(f"reply #{k}." for k in range(1, 9)), "turns": 8}
    steps = await runs_service.list_steps_of_runs(sessions, [run.id], after=0, first=100)
    assert [s.attempt for s in steps[run.id]] == [0] * 5 + [1] * 3  # 0: reused
    # Each reply's step carries its own usage (the console's step panel); a reused one none.
    assert await _step_usages(api, tenant, retried_id) == [None] * 5 + [
        {
            "requests": 1,
            "inputTokens": usage_of(k)["prompt_tokens"],
            "outputTokens": usage_of(k)["completion_tokens"],
            "model": "tiny",
            "costUsd": None,
        }
        for k in range(6, 9)
    ]
    # The reused replies were paid for by the first run: each is counted there, once.
    assert (await _usage(api, tenant, retried_id))["usage"] == _expected_usage(range(6, 9))
    assert (await _usage(api, tenant, started["run"]["id"]))["usage"] == _expected_usage(
        range(1, 6)
    )
    days = await api.gql(
        "{ usageTokens(days: 1) { agent inputTokens outputTokens costUsd } }", token=tenant.token
    )
    whole = _expected_usage(range(1, 9))
    assert days["usageTokens"] == [
        {
            "agent": "llm",
            "inputTokens": whole["inputTokens"],
            "outputTokens": whole["outputTokens"],
            "costUsd": None,
        }
    ]


async def test_replies_recorded_before_llm_ran_on_pydantic_ai_are_reused(
    api: Api,
    settings: Settings,
    worker: WorkerHost,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[StubModel, str],
) -> None:
    """The `reply` steps of a run from before the upgrade hold `{content, finish_reason}` (the
    old client's record), not a `ModelResponse`: a retry that reuses them asks only for the
    rest, and sends the recorded replies back as the conversation."""
    model, _ = stub
    model.turns = 4
    model.script[3] = Answer(status=400)  # reply 3 fails the run at once
    started = await api.start_run(tenant.token, "llm", {"prompt": "story", "maxTurns": 4})
    failed = await _settled(api, settings, sessions, tenant, started["run"]["id"])
    assert failed.status == "FAILED"
    async with sessions.unit() as uow:  # as the old agent recorded them
        for k in (1, 2):
            await uow.execute(
                text(
                    "UPDATE run_steps SET result = CAST(:r AS jsonb)"
                    " WHERE run_id = :id AND name = 'reply' AND occurrence = :k"
                ),
                r=json.dumps({"content": f"old #{k}.", "finish_reason": "length"}),
                id=failed.id,
                k=k,
            )
    data = await api.gql(
        "mutation($id: ID!) { retryRun(id: $id, reuseSteps: true) { run { id } } }",
        {"id": started["run"]["id"]},
        token=tenant.token,
    )
    run = await _settled(api, settings, sessions, tenant, data["retryRun"]["run"]["id"])
    assert run.status == "SUCCEEDED", run.error
    assert len(model.requests) == 3 + 2  # replies 3 and 4 only
    resumed = model.requests[3]["messages"]
    assert [m["content"] for m in resumed if m["role"] == "assistant"] == ["old #1.", "old #2."]
    assert run.output == {"reply": "old #1.old #2.reply #3.reply #4.", "turns": 4}


async def test_a_call_that_times_out_is_asked_again_inside_the_attempt(
    api: Api, servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    """`OUTLIVE_LLM_TIMEOUT_S` bounds each call, and a call that timed out is a failure the
    step's policy retries inside the attempt, not a fault of the run."""
    model = StubModel(turns=1)
    model.script[1] = Answer(delay_s=3)
    async with serve(model) as url:
        settings = make_settings(
            servers, llm_base_url=url, llm_model="tiny", llm_timeout_s=0.5, llm_retry_backoff_s=0.05
        )
        host = WorkerHost(settings, concurrency=2)
        await host.start()
        try:
            started = await api.start_run(tenant.token, "llm", {"prompt": "hi"})
            run = await _settled(api, settings, sessions, tenant, started["run"]["id"])
        finally:
            await host.stop()
    assert run.status == "SUCCEEDED", run.error
    assert run.attempt == 1
    assert len(model.requests) == 2
    assert run.output == {"reply": "reply #1.", "turns": 1}


async def test_a_stopped_worker_lets_the_reply_in_flight_finish_and_buys_it_once(
    api: Api,
    settings: Settings,
    sessions: Sessions,
    tenant: TenantHandle,
    stub: tuple[StubModel, str],
) -> None:
    """Issue 40 (round five, F8): a SIGTERM (a deploy) lets a model step in flight finish and
    be recorded within OUTLIVE_SHUTDOWN_STEP_GRACE_S, starts no other step, and hands the run
    back: the next worker asks only for the replies not recorded."""
    model, _ = stub
    model.turns = 3
    model.script[2] = Answer(delay_s=1.5)  # in flight when the worker is told to stop
    first = WorkerHost(settings, concurrency=2)
    await first.start()
    started = await api.start_run(tenant.token, "llm", {"prompt": "story", "maxTurns": 3})
    run_id = started["run"]["id"]
    await model.wait_for_requests(2)
    asked = time.monotonic()
    await first.stop()  # what SIGTERM does
    stopped_in = time.monotonic() - asked
    handed_back = await runs_service.read_run(sessions, tenant.id, run_id)
    second = WorkerHost(settings, concurrency=2)
    await second.start()
    try:
        run = await _settled(api, settings, sessions, tenant, run_id)
    finally:
        await second.stop()
    events = await runs_service.list_events(sessions, run.id)

    assert handed_back is not None
    assert handed_back.status == "QUEUED"
    assert handed_back.step_seq == 2  # reply 2 finished and was recorded before the stop
    assert 1.0 < stopped_in < 10
    assert run.status == "SUCCEEDED", run.error
    assert len(model.requests) == 3  # the minimal count: no reply bought twice
    assert [e.type for e in events].count("released") == 1
    read = await _usage(api, tenant, run_id)
    assert read["usage"]["requests"] == 3
    assert read["usage"]["abandonedRequests"] == 0
