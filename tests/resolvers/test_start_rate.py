"""`OUTLIVE_RATE_START_RUN` is one bucket per tenant for every run started on its behalf:
`startRun`, `retryRun` and each run a `replayRuns` starts (issue 19, item 2)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import func, select

from outlive.config import Settings
from outlive.db.models import Run
from outlive.db.tx import Sessions
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.resolvers.test_replays import REPLAY, RETRY, STATE, insert_runs
from tests.support import Api, NudgeWatch, Servers, TenantHandle

pytestmark = pytest.mark.timeout(120)

START = "mutation($i: StartRunInput!) { startRun(input: $i) { created run { id } } }"


def _code(response: Any) -> str:
    (error,) = response.json()["errors"]
    return str(error["extensions"]["code"])


async def _runs(sessions: Sessions, tenant: TenantHandle) -> int:
    async with sessions.unit() as uow:
        found = await uow.session.scalar(
            select(func.count()).select_from(Run).where(Run.tenant_id == tenant.id)
        )
    return int(found or 0)


@asynccontextmanager
async def _worker(settings: Settings) -> AsyncIterator[WorkerHost]:
    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        yield host
    finally:
        await host.stop()


async def test_retry_run_takes_from_the_start_run_bucket(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, other_tenant: TenantHandle
) -> None:
    async with Api.running(make_settings(servers, rate_start_run="2/3600")) as api:
        first = (await api.start_run(tenant.token, "demo", {"turns": 1}))["run"]["id"]
        await api.cancel(tenant.token, first)
        await api.gql(RETRY, {"id": first}, token=tenant.token)  # the second token
        before = await _runs(sessions, tenant)
        assert _code(await api.post(RETRY, {"id": first}, token=tenant.token)) == "RATE_LIMITED"
        response = await api.post(
            START, {"i": {"agent": "llm", "input": {"prompt": "hi"}}}, token=tenant.token
        )
        assert _code(response) == "RATE_LIMITED"  # the same bucket
        assert await _runs(sessions, tenant) == before
        await api.start_run(other_tenant.token, "demo", {"turns": 1})  # another tenant's own


async def test_each_run_a_replay_starts_takes_from_the_start_run_bucket(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, rate_start_run="2/3600")
    past = datetime.now(UTC) - timedelta(minutes=10)
    await insert_runs(
        sessions,
        tenant.id,
        [
            (agent, "FAILED", input, past + timedelta(seconds=i))
            for i, (agent, input) in enumerate(
                [("demo", {"turns": 1, "delayMs": 0}), ("llm", {"prompt": "hi"})] * 2
            )
        ],
    )
    async with (
        Api.running(settings) as api,
        _worker(settings),
        NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watch,
    ):
        replay = (await api.gql(REPLAY, {"rate": 5}, token=tenant.token))["replayRuns"]
        assert replay["total"] == 4

        async def state() -> dict[str, Any]:
            found: dict[str, Any] = (
                await api.gql(STATE, {"id": replay["id"]}, token=tenant.token)
            )["runReplay"]
            return found

        async def two_started() -> dict[str, Any] | None:
            found = await state()
            return found if found["started"] >= 2 else None

        await watch.until_true(two_started, 30, "two runs started by the replay")
        # The bucket is spent: startRun is refused, and the replay's next ticks start nothing.
        response = await api.post(
            START, {"i": {"agent": "demo", "input": {"turns": 1}}}, token=tenant.token
        )
        assert _code(response) == "RATE_LIMITED"
        ticks = 0
        while ticks < 2:
            nudge = await watch.next_nudge(timeout=10)
            assert nudge is not None, "the replay stopped ticking"
            ticks += nudge["type"] == "replay.updated"
        now = await state()
    assert (now["status"], now["started"], now["skipped"]) == ("RUNNING", 2, 0)
