"""`outlive replay --live-from STEP` (issue 43): recorded `llm` runs re-executed from their model
step with the real model (the stub), the earlier steps from the journal, nothing written to the
original runs; the new output beside the old one; a budget with no room left stops it."""

from __future__ import annotations

from collections.abc import AsyncIterator
from datetime import UTC, datetime
from decimal import Decimal
from uuid import uuid4

import httpx
import pytest
from sqlalchemy import text

from outlive.agents.llm import AGENT
from outlive.agents.registry import AgentRegistry
from outlive.db.models import BudgetBreach, BudgetPeriod, BudgetScope
from outlive.db.tx import Sessions
from outlive.services.budgets import BudgetRecord
from outlive.services.runs.recorded import Filters, read_recorded
from outlive.worker import WorkerHost
from outlive.workflows.live import live_run
from tests.agents.stub_model import StubModel, serve
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle

pytestmark = [pytest.mark.timeout(300)]

START = "mutation($i: StartRunInput!) { startRun(input: $i) { run { id } } }"
STATUS = "query($id: ID!) { run(id: $id) { status } }"
WRITTEN = """SELECT (SELECT count(*) FROM run_steps s JOIN runs r ON r.id = s.run_id
                      WHERE r.tenant_id = :t) AS steps,
                     (SELECT count(*) FROM run_events e JOIN runs r ON r.id = e.run_id
                      WHERE r.tenant_id = :t) AS events,
                     (SELECT max(updated_at) FROM runs WHERE tenant_id = :t) AS updated,
                     (SELECT count(*) FROM runs WHERE tenant_id = :t) AS runs"""


@pytest.fixture
async def stub() -> AsyncIterator[tuple[StubModel, str]]:
    model = StubModel()
    async with serve(model) as url:
        yield model, url


async def record(
    servers: Servers, tenant: TenantHandle, sessions: Sessions, url: str, count: int
) -> list[str]:
    settings = make_settings(servers, llm_base_url=url)
    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        async with (
            Api.running(settings) as api,
            NudgeWatch(servers.redis_url, sessions, tenant.id) as watch,
        ):
            ids = []
            for i in range(count):
                options = {"agent": "llm", "key": f"k{i}", "input": {"prompt": f"q{i}"}}
                data = await api.gql(START, {"i": options}, token=tenant.token)
                ids.append(data["startRun"]["run"]["id"])

            async def done() -> bool | None:
                for run_id in ids:
                    run = (await api.gql(STATUS, {"id": run_id}, token=tenant.token))["run"]
                    if run["status"] != "SUCCEEDED":
                        return None
                return True

            await watch.until_true(done, 120, "the recorded llm runs")
    finally:
        await host.stop()
    return ids


async def test_live_from_reexecutes_the_model_step_and_writes_nothing(
    servers: Servers, tenant: TenantHandle, sessions: Sessions, stub: tuple[StubModel, str]
) -> None:
    from outlive.cli.replay import live

    model, url = stub
    ids = await record(servers, tenant, sessions, url, 3)
    model.script.clear()
    asked = len(model.requests)
    before = await sessions.one(text(WRITTEN), t=tenant.id)
    settings = make_settings(servers, llm_base_url=url)
    slug = tenant.principal.tenant.slug
    results = await live(settings, Filters(tenant=slug, agent="llm"), "reply")
    assert sorted(r.run_id for r in results) == sorted(ids)
    assert len(model.requests) == asked + 3  # the real model, once per run
    for r in results:
        assert r.reached
        assert r.stopped is None
        assert r.old == {"reply": "reply #1.", "turns": 1}
        assert r.new == {"reply": "reply #1.", "turns": 1}
        assert r.spent.requests == 1
        assert r.spent.tokens == 111  # the stub's usage of reply #1
    assert await sessions.one(text(WRITTEN), t=tenant.id) == before  # nothing written

    never = await live(settings, Filters(tenant=slug, agent="llm"), "no-such-step")
    assert all(not r.reached for r in never)  # every step answered from the journal
    assert len(model.requests) == asked + 3


async def test_live_from_stops_where_a_budget_has_no_room_left(
    servers: Servers, tenant: TenantHandle, sessions: Sessions, stub: tuple[StubModel, str]
) -> None:
    model, url = stub
    await record(servers, tenant, sessions, url, 1)
    settings = make_settings(servers, llm_base_url=url)
    [recorded] = await read_recorded(sessions, Filters(tenant=tenant.principal.tenant.slug))
    spent = BudgetRecord(
        id=uuid4(),
        scope=BudgetScope.AGENT,
        target="llm",
        period=BudgetPeriod.DAY,
        limit_tokens=1000,
        limit_usd=None,
        warn_at=0.8,
        on_breach=BudgetBreach.PAUSE,
        spent_tokens=990,
        spent_usd=Decimal(0),
        reserved_tokens=10,
        period_start=datetime.now(UTC),
        held_runs=0,
        unpriced_models=(),
    )
    asked = len(model.requests)
    async with httpx.AsyncClient() as http:
        result = await live_run(
            recorded,
            AgentRegistry([AGENT]),
            settings,
            live_from="reply",
            http=http,
            limits=None,
            budgets=[spent],
        )
    assert result.stopped == f"stopped at step reply: budget {spent.id} has no room left"
    assert result.new is None
    assert len(model.requests) == asked  # the model was not called
