"""An attempt that cannot reach PostgreSQL to heartbeat stops before its lease could expire,
counted on its own monotonic clock from the start of its last successful heartbeat; once
PostgreSQL is back and the lease has expired, the next delivery takes the run over and settles
it once. A real cluster of the test's own is SIGKILLed while the run executes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from outlive.agents.demo import AGENT as DEMO
from outlive.agents.demo import DemoInput
from outlive.agents.registry import Agent, AgentRegistry, RunContext
from outlive.db.engine import create_engine, create_sessions
from outlive.db.models import RunStatus
from outlive.db.raw import create_pool
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.services import runs as runs_service
from outlive.workflows.runs import WorkflowDeps
from tests.conftest import make_settings, new_tenant
from tests.faults import OwnPostgres
from tests.support import Servers
from tests.workflows.test_lease import Control, deliver, start

LEASE_S = 1.5  # a heartbeat every 0.5 s


class Parked:
    """A `demo` whose first attempt touches nothing (no event, no read) until cancelled: only
    the heartbeats can notice that PostgreSQL is gone. Later attempts are the real `demo`."""

    def __init__(self) -> None:
        self.running = asyncio.Event()
        self.stopped_at: float | None = None  # monotonic: when the first attempt was cancelled

    async def run(self, ctx: RunContext, params: DemoInput) -> Any:
        if ctx.attempt > 1:
            return await DEMO.run(ctx, params)
        self.running.set()
        try:
            await asyncio.Event().wait()
        finally:
            self.stopped_at = time.monotonic()


@pytest.fixture
async def own_sessions() -> AsyncIterator[tuple[OwnPostgres, Sessions]]:
    async with OwnPostgres.running() as postgres:
        engine = create_engine(postgres.url)
        pool = await create_pool(postgres.url)
        yield postgres, create_sessions(engine, raw=pool)
        await pool.close()
        await engine.dispose()


async def test_an_attempt_that_cannot_heartbeat_stops_before_its_lease_and_is_taken_over(
    servers: Servers, own_sessions: tuple[OwnPostgres, Sessions]
) -> None:
    postgres, sessions = own_sessions
    parked = Parked()
    agent = Agent(DEMO.name, DEMO.description, DemoInput, parked.run)
    settings = make_settings(servers, database_url=postgres.url, run_heartbeat_s=LEASE_S)
    tenant = await new_tenant(sessions)
    run_id = RunId(await start(sessions, tenant, {"turns": 2, "delayMs": 0}))
    control = Control()
    async with httpx.AsyncClient() as http:
        deps = WorkflowDeps(sessions, AgentRegistry([agent]), http, settings)
        first = asyncio.create_task(deliver(deps, run_id, control))
        await parked.running.wait()
        await control.until_heartbeats(2)
        await postgres.kill()
        killed = time.monotonic()  # the last heartbeat that succeeded started before this
        assert await first == "retry later"  # stopped without settling; no saq attempt used
        assert parked.stopped_at is not None
        assert parked.stopped_at < killed + LEASE_S  # before the lease could have expired

        # The lease outlives the outage; after it, the next delivery takes the run over.
        await postgres.start()
        outcomes = [await deliver(deps, run_id)]
        while outcomes[-1] == "retry later":  # the lease was still live: come back later
            await asyncio.sleep(LEASE_S / 3)
            outcomes.append(await deliver(deps, run_id))
    assert outcomes[-1] == "done", outcomes
    run = await runs_service.read_run(sessions, tenant.id, run_id)
    assert run is not None
    assert (run.status, run.attempt, run.lost_attempts) == (RunStatus.SUCCEEDED, 2, 1)
    types = [e.type for e in await runs_service.list_events(sessions, run_id)]
    assert types == ["claimed", "lost", "claimed", "turn", "step", "turn", "step", "succeeded"]
