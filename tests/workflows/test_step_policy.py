"""A step's own policy (`retry`, `timeout`, `shield`), the cancel that interrupts a step, the
success that a cancel wins over, and usage recorded with the step (issue 29)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any
from uuid import uuid4

import httpx
import pytest
from sqlalchemy import text

from outlive.agents.policy import Retry, is_retryable, parse_retry_after, retry_after_of
from outlive.agents.registry import AgentRegistry
from outlive.db.models import RunStatus
from outlive.db.tx import Sessions
from outlive.errors import RetryableFault, RetryAfter, RunCancelled
from outlive.ids import RunId, TenantId
from outlive.jobs.cancels import CancelListener
from outlive.schema.runs import retries_left
from outlive.services import runs as runs_service
from outlive.services.runs import claim_run, settle_run
from outlive.workflows.runs import AttemptContext, WorkflowDeps
from tests.conftest import make_settings
from tests.support import Servers, TenantHandle
from tests.workflows.test_lease import start


@pytest.fixture
async def deps(servers: Servers, sessions: Sessions) -> AsyncIterator[WorkflowDeps]:
    settings = make_settings(servers, run_heartbeat_s=30)
    async with httpx.AsyncClient() as http:
        yield WorkflowDeps(
            sessions=sessions, agents=AgentRegistry([]), http=http, settings=settings
        )


async def attempt(deps: WorkflowDeps, tenant: TenantHandle) -> AttemptContext:
    run_id = await start(deps.sessions, tenant, {})
    async with deps.sessions.unit() as uow:
        run = await claim_run(uow, run_id, lease_s=30)
    assert run is not None
    return AttemptContext(deps, run)


async def usage_rows(sessions: Sessions, run_id: RunId) -> list[tuple[str, int, int, int]]:
    rows = await sessions.all(
        text(
            "SELECT name, requests, input_tokens, output_tokens FROM run_steps"
            " WHERE run_id = :id ORDER BY seq"
        ),
        id=run_id,
    )
    return [(r["name"], r["requests"], r["input_tokens"], r["output_tokens"]) for r in rows]


def test_retry_after_is_read_as_seconds_or_an_http_date() -> None:
    assert parse_retry_after("3") == 3.0
    assert parse_retry_after(None) is None
    assert parse_retry_after("soon") is None
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 28 <= (parse_retry_after(later) or 0) <= 30
    response = httpx.Response(429, headers={"Retry-After": "7"}, request=httpx.Request("GET", "/"))
    error = httpx.HTTPStatusError("429", request=response.request, response=response)
    assert is_retryable(error)
    assert retry_after_of(error) == 7.0
    assert not is_retryable(ValueError("a bug"))
    assert Retry(backoff=1, max_backoff=3, jitter=False).delay(5) == 3  # capped
    assert 0.5 <= Retry(backoff=1).delay(1) <= 1.0  # jittered


async def test_a_retryable_failure_is_retried_in_the_step_waiting_what_it_asked(
    deps: WorkflowDeps, tenant: TenantHandle
) -> None:
    ctx = await attempt(deps, tenant)
    calls: list[float] = []

    async def flaky() -> str:
        calls.append(time.monotonic())
        await ctx.emit("tried", {"n": len(calls)})  # a failed call's events are dropped
        if len(calls) == 1:
            raise RetryAfter(0.3)
        if len(calls) == 2:
            raise RetryableFault("again")
        return "ok"

    assert await ctx.step("flaky", flaky, retry=Retry(attempts=3, backoff=0.01)) == "ok"
    assert len(calls) == 3
    assert calls[1] - calls[0] >= 0.3
    events = await runs_service.list_events(deps.sessions, ctx.run_id)
    assert [e.data for e in events if e.type == "tried"] == [{"n": 3}]


async def test_a_non_retryable_failure_fails_at_once_and_a_spent_policy_raises_the_last(
    deps: WorkflowDeps, tenant: TenantHandle
) -> None:
    ctx = await attempt(deps, tenant)
    calls = 0

    async def broken() -> None:
        nonlocal calls
        calls += 1
        raise ValueError("a bug")

    with pytest.raises(ValueError, match="a bug"):
        await ctx.step("broken", broken, retry=Retry(attempts=5, backoff=0.01))
    assert calls == 1

    async def slow() -> None:
        await asyncio.sleep(5)

    with pytest.raises(TimeoutError):  # each call timed out; the run's budget takes over
        await ctx.step("slow", slow, retry=Retry(attempts=2, backoff=0.01), timeout=0.1)


async def test_a_cancel_interrupts_the_step_and_a_shielded_step_finishes_first(
    deps: WorkflowDeps, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    ctx = await attempt(deps, tenant)
    began = asyncio.Event()

    async def long_call() -> str:
        began.set()
        await asyncio.sleep(30)
        return "never"

    waiting = asyncio.create_task(ctx.step("long", long_call))
    await began.wait()
    ctx.cancel_requested()
    with pytest.raises(RunCancelled):
        await asyncio.wait_for(waiting, 2)

    shielded = await attempt(deps, other_tenant)  # one active demo run per tenant
    began.clear()

    async def must_finish() -> str:
        began.set()
        await asyncio.sleep(0.2)
        return "done"

    waiting = asyncio.create_task(shielded.step("charge", must_finish, shield=True))
    await began.wait()
    shielded.cancel_requested()
    assert await waiting == "done"  # recorded; the cancel wins at the next checkpoint
    with pytest.raises(RunCancelled):
        await shielded.checkpoint()
    assert await usage_rows(deps.sessions, ctx.run_id) == []
    assert [r[0] for r in await usage_rows(deps.sessions, shielded.run_id)] == ["charge"]


async def test_a_cancel_requested_during_the_last_step_wins_over_the_success(
    deps: WorkflowDeps, tenant: TenantHandle
) -> None:
    ctx = await attempt(deps, tenant)
    async with deps.sessions.unit(tenant.id) as uow:
        await runs_service.cancel_run(uow, ctx.run_id)
    async with deps.sessions.unit(tenant.id) as uow:
        settled = await settle_run(
            uow, ctx.run_id, RunStatus.SUCCEEDED, output={"x": 1}, attempt=ctx.attempt
        )
    assert settled is not None
    assert settled.status == RunStatus.CANCELLED
    assert settled.output is None
    events = await runs_service.list_events(deps.sessions, ctx.run_id)
    assert events[-1].type == "cancelled"


async def test_the_cancel_request_is_pushed_to_the_worker_within_a_second(
    deps: WorkflowDeps, servers: Servers, tenant: TenantHandle
) -> None:
    listener = CancelListener(servers.database_url)
    await listener.start()
    try:
        assert listener.listening.is_set()
        ctx = await attempt(deps, tenant)
        heard = asyncio.Event()
        unwatch = listener.watch(ctx.run_id, heard.set)
        asked = time.monotonic()
        async with deps.sessions.unit(tenant.id) as uow:
            await runs_service.cancel_run(uow, ctx.run_id)
        await asyncio.wait_for(heard.wait(), 5)
        assert time.monotonic() - asked < 1.0
        unwatch()
    finally:
        await listener.stop()


async def test_usage_is_recorded_with_its_step_and_only_there(
    deps: WorkflowDeps, tenant: TenantHandle
) -> None:
    ctx = await attempt(deps, tenant)

    def call_model() -> dict[str, Any]:
        ctx.record_usage(input_tokens=100, output_tokens=20, model="gpt-4o-mini")
        ctx.record_usage(input_tokens=50, output_tokens=5, model="gpt-4o-mini")
        return {"text": "hi"}

    def carried() -> dict[str, Any]:
        return {"text": "hi", "usage": {"prompt_tokens": 7, "completion_tokens": 3}}

    await ctx.step("call", call_model)
    await ctx.step("carried", carried)
    with pytest.raises(RuntimeError, match="inside a step"):
        ctx.record_usage(input_tokens=1, output_tokens=1)
    assert await usage_rows(deps.sessions, ctx.run_id) == [
        ("call", 2, 150, 25),
        ("carried", 1, 7, 3),
    ]
    async with deps.sessions.unit(tenant.id) as uow:
        record = await runs_service.read_run(uow, tenant.id, ctx.run_id)
    assert record is not None
    assert retries_left(record) == 2  # attempt 1, running


def test_retries_left_counts_neither_resumes_nor_lost_workers() -> None:
    now = datetime.now(UTC)
    fresh = runs_service.RunRecord(
        id=RunId(uuid4()),
        tenant_id=TenantId(uuid4()),
        agent="demo",
        status=RunStatus.QUEUED,
        attempt=0,
        input={},
        output=None,
        error=None,
        created_at=now,
        updated_at=now,
        started_at=None,
        finished_at=None,
        cancel_requested_at=None,
    )
    assert retries_left(fresh) == 2
    assert retries_left(replace(fresh, status=RunStatus.QUEUED, attempt=1)) == 1  # a retry due
    assert retries_left(replace(fresh, status=RunStatus.RUNNING, attempt=2)) == 1
    woken = replace(fresh, status=RunStatus.QUEUED, attempt=1, resumes=1)
    assert retries_left(woken) == 2
    lost = replace(fresh, status=RunStatus.RUNNING, attempt=3, lost_attempts=2)
    assert retries_left(lost) == 2
    assert retries_left(replace(fresh, status=RunStatus.FAILED, attempt=3)) == 0
