"""Retention per tenant through GraphQL (contract §7 "Retention and erasure", issue 46):
`setRetention` bounds how long the tenant's settled runs are kept (default
`OUTLIVE_RETENTION_DAYS`), `Tenant.retentionDays` says it; the retention task deletes them in
bounded batches, never a row of another tenant, never an active run, and usage totals are kept.
The runs are made by `startRun` and aged by moving their clocks back (the only thing done in
SQL: a test cannot wait days)."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.tasks.retention import prune_old_deliveries, prune_old_runs
from outlive.cron.tasks.usage import roll_up_daily_usage
from outlive.db.tx import Sessions
from tests.governance.test_erasure import USAGE, read, start, totals
from tests.support import Api, GraphQLError, NudgeWatch, TenantHandle, settled

pytestmark = [pytest.mark.timeout(180), pytest.mark.usefixtures("worker")]

SET = "mutation($d: Int!) { setRetention(days: $d) { id slug retentionDays } }"
VIEWER = "{ viewer { tenant { retentionDays } } }"
_AGE = text(
    "UPDATE runs SET created_at = created_at - make_interval(days => :d),"
    " finished_at = finished_at - make_interval(days => :d) WHERE id = ANY(CAST(:ids AS uuid[]))"
)


async def retention_days(api: Api, who: TenantHandle) -> int:
    days: int = (await api.gql(VIEWER, token=who.token))["viewer"]["tenant"]["retentionDays"]
    return days


@pytest.fixture
async def watch(settings: Settings, sessions: Sessions, tenant: TenantHandle) -> Any:
    async with NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watching:
        yield watching


async def test_set_retention_is_read_back_and_bounded(
    api: Api, tenant: TenantHandle, other_tenant: TenantHandle, settings: Settings
) -> None:
    assert await retention_days(api, tenant) == settings.retention_days
    changed = (await api.gql(SET, {"d": 7}, token=tenant.token))["setRetention"]
    assert changed["retentionDays"] == 7
    assert changed["id"] == str(tenant.id)
    assert await retention_days(api, tenant) == 7
    assert await retention_days(api, other_tenant) == settings.retention_days
    for days in (0, 3651):
        with pytest.raises(GraphQLError) as refused:
            await api.gql(SET, {"d": days}, token=tenant.token)
        assert refused.value.codes == ["BAD_USER_INPUT"]
    assert await retention_days(api, tenant) == 7


async def test_retention_deletes_only_the_tenants_old_settled_runs_and_keeps_usage(
    api: Api,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    sessions: Sessions,
    settings: Settings,
    watch: NudgeWatch,
) -> None:
    tag = f"r-{uuid.uuid4().hex[:8]}"
    old = [await start(api, tenant, [tag], turns=1) for _ in range(5)]
    young = await start(api, tenant, [tag], turns=1)
    active = await start(api, tenant, [tag], turns=1, awaitSignal="never")
    theirs = await start(api, other_tenant, [tag], turns=1)  # as old, another tenant
    for run_id in [*old, young]:
        await watch.until(run_id, settled)
    await watch.until(active, lambda r: r.status == "WAITING")
    async with NudgeWatch(settings.redis_url or "", sessions, other_tenant.id) as theirs_watch:
        await theirs_watch.until(theirs, settled)
    async with sessions.unit() as uow:
        await uow.execute(_AGE, d=3, ids=[*old, active, theirs])
        await uow.execute(_AGE, d=1, ids=[young])
    redis = Redis.from_url(settings.redis_url or "")
    deps = CronDeps(sessions=sessions, settings=settings, redis=redis)
    await roll_up_daily_usage(deps)  # the days the runs were moved to are rolled up again
    before = totals(await api.gql(USAGE.replace("days: 2", "days: 5"), token=tenant.token))
    assert before[0] == 7

    await api.gql(SET, {"d": 2}, token=tenant.token)  # the other tenant keeps the default 30
    assert await prune_old_runs(deps) >= 5
    await prune_old_deliveries(deps)
    await roll_up_daily_usage(deps)  # recomputed from what is left, and what was kept
    await redis.aclose()

    for run_id in old:
        assert await read(api, tenant, run_id) is None
    assert await read(api, tenant, young) is not None  # 1 day old: within its 2
    assert await read(api, tenant, active) is not None  # never while active, however old
    assert await read(api, other_tenant, theirs) is not None  # its tenant keeps 30 days
    after = totals(await api.gql(USAGE.replace("days: 2", "days: 5"), token=tenant.token))
    assert after == before  # usage totals are kept
