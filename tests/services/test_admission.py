"""Per-tenant caps, enforced in PostgreSQL: a burst never puts more of a tenant's runs in flight
than its cap, across two real worker processes; a waiting run says why and where it is; another
tenant's work overtakes a flood; deliveries and emails are capped the same way."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import datetime
from typing import Any

import asyncpg
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.config import Settings
from tests.conftest import new_tenant
from tests.realtime.clients import ApiProcess
from tests.services.conftest import MANY, World
from tests.support import Api, NudgeWatch, TenantHandle, loopback_server, service_env

READ = "query($id: ID!) { run(id: $id) { status waitingReason } }"


async def set_cap(world: World, tenant: TenantHandle, runs: int | None, jobs: int | None) -> None:
    conn = await asyncpg.connect(world.database_url)
    await conn.execute(
        "UPDATE tenants SET max_running_runs = $2, max_inflight_jobs = $3 WHERE id = $1",
        tenant.id,
        runs,
        jobs,
    )
    await conn.close()


async def intervals(world: World, tenant: TenantHandle) -> list[tuple[datetime, datetime]]:
    """(first claim, settle) of each of the tenant's runs: when it held a worker."""
    conn = await asyncpg.connect(world.database_url)
    rows = await conn.fetch(
        """SELECT min(e.at) FILTER (WHERE e.type = 'claimed') AS began, r.finished_at
             FROM runs r JOIN run_events e ON e.run_id = r.id
            WHERE r.tenant_id = $1 GROUP BY r.id, r.finished_at""",
        tenant.id,
    )
    await conn.close()
    return [(r["began"], r["finished_at"]) for r in rows]


def most_at_once(spans: list[tuple[datetime, datetime]]) -> int:
    edges = sorted([(a, 1) for a, _ in spans] + [(b, -1) for _, b in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


@contextlib.asynccontextmanager
async def workers(settings: Settings, count: int) -> AsyncIterator[None]:
    env = service_env(settings, OUTLIVE_AGENT_MODULES=MANY, OUTLIVE_WEBHOOK_ALLOW_PRIVATE="1")
    async with contextlib.AsyncExitStack() as stack:
        for _ in range(count):
            await stack.enter_async_context(
                ApiProcess.running(env, command=("worker", "--concurrency", "16"))
            )
        yield


async def start(api: Api, tenant: TenantHandle, agent: str, delay_ms: int) -> str:
    started = await api.start_run(tenant.token, agent, {"turns": 1, "delayMs": delay_ms})
    assert started["created"]
    run_id: str = started["run"]["id"]
    return run_id


async def test_a_200_run_burst_never_exceeds_the_tenant_s_cap_across_two_workers(
    world: World,
) -> None:
    tenant = await new_tenant(world.sessions, "burst")
    await set_cap(world, tenant, runs=5, jobs=None)
    assert world.settings.redis_url is not None
    async with Api.running(world.settings) as api:
        ids = await asyncio.gather(*(start(api, tenant, f"many-{i}", 50) for i in range(200)))
        last = await api.gql(READ, {"id": ids[-1]}, token=tenant.token)
        assert last["run"]["status"] == "QUEUED"
        reason = last["run"]["waitingReason"]
        assert "at most 5" in reason
        assert "in line" in reason
        async with (
            workers(world.settings, 2),
            NudgeWatch(world.settings.redis_url, world.sessions, tenant.id) as watch,
        ):

            async def all_done() -> bool | None:
                listed = await api.gql(
                    "{ runs(first: 100, status: [QUEUED, RUNNING]) { edges { node { id } } } }",
                    token=tenant.token,
                )
                return True if not listed["runs"]["edges"] else None

            await watch.until_true(all_done, timeout=120, what="the burst")
        done = await api.gql(READ, {"id": ids[-1]}, token=tenant.token)
    assert done["run"] == {"status": "SUCCEEDED", "waitingReason": None}
    spans = await intervals(world, tenant)
    assert len(spans) == 200
    assert most_at_once(spans) == 5  # the cap, reached and never passed


async def test_a_quiet_tenant_s_run_overtakes_another_tenant_s_flood(world: World) -> None:
    noisy = await new_tenant(world.sessions, "noisy")
    quiet = await new_tenant(world.sessions, "quiet")
    await set_cap(world, noisy, runs=2, jobs=None)
    assert world.settings.redis_url is not None
    async with Api.running(world.settings) as api:
        flood = [await start(api, noisy, f"many-{i}", 100) for i in range(40)]
        quiet_run = await start(api, quiet, "demo", 0)  # written after the whole flood
        async with (
            workers(world.settings, 1),
            NudgeWatch(world.settings.redis_url, world.sessions, quiet.id) as watch,
        ):
            await watch.until(quiet_run, lambda r: r.status == "SUCCEEDED", timeout=60)
            noisy_done = await api.gql(
                "{ runs(first: 100, status: [SUCCEEDED]) { edges { node { id } } } }",
                token=noisy.token,
            )
    # In arrival order it would have waited for all 40; admitted at once, it waited for few.
    assert len(noisy_done["runs"]["edges"]) < 10, len(flood)


async def test_a_tenant_s_deliveries_in_flight_are_capped_and_do_not_hold_up_another_s(
    world: World,
) -> None:
    slow = await new_tenant(world.sessions, "slow")
    other = await new_tenant(world.sessions, "other")
    await set_cap(world, slow, runs=None, jobs=2)
    held: list[str] = []  # the tenant of each request the receiver is holding or has held
    release = asyncio.Event()
    arrived = asyncio.Condition()

    async def hook(request: Request) -> Response:
        tenant = request.path_params["tenant"]
        async with arrived:
            held.append(tenant)
            arrived.notify_all()
        if tenant == "slow":
            await release.wait()  # a slow endpoint: it answers when the test says so
        return Response(status_code=204)

    receiver = Starlette(routes=[Route("/{tenant}", hook, methods=["POST"])])
    assert world.settings.redis_url is not None
    async with (
        loopback_server(receiver) as base,
        Api.running(world.settings) as api,
        workers(world.settings, 1),
    ):
        for tenant, name in ((slow, "slow"), (other, "other")):
            await api.gql(
                "mutation($u: String!) { createWebhookEndpoint(url: $u) { endpoint { id } } }",
                {"u": f"{base}/{name}"},
                token=tenant.token,
            )
        for i in range(6):  # six settled runs: six deliveries, at most two let through
            await start(api, slow, f"many-{i}", 0)
        async with arrived, asyncio.timeout(60):
            await arrived.wait_for(lambda: held.count("slow") == 2)
        await start(api, other, "demo", 0)
        async with arrived, asyncio.timeout(60):
            await arrived.wait_for(lambda: "other" in held)  # not stuck behind the slow ones
        assert held.count("slow") == 2
        pending = await _pending(world, slow)
        assert pending == {"admitted": 2, "waiting": 4}
        release.set()
        async with arrived, asyncio.timeout(60):
            await arrived.wait_for(lambda: held.count("slow") == 6)


async def _pending(world: World, tenant: TenantHandle) -> dict[str, Any]:
    conn = await asyncpg.connect(world.database_url)
    row = await conn.fetchrow(
        """SELECT count(*) FILTER (WHERE dispatched_at IS NOT NULL) AS admitted,
                  count(*) FILTER (WHERE dispatched_at IS NULL) AS waiting
             FROM webhook_deliveries WHERE tenant_id = $1 AND status = 'PENDING'""",
        tenant.id,
    )
    await conn.close()
    assert row is not None
    return dict(row)


async def test_set_limits_admits_what_a_raised_cap_lets_through(world: World) -> None:
    from tests.test_cli import outlive

    tenant = await new_tenant(world.sessions, "capped")
    env = service_env(world.settings, OUTLIVE_AGENT_MODULES=MANY)
    slug = tenant.principal.tenant.slug
    done = outlive("tenant", "set-limits", "--tenant", slug, "--max-running-runs", "1", env=env)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == f"{slug}: max-running-runs 1, max-inflight-jobs default (20)"
    async with Api.running(world.settings) as api:  # no worker: admitted runs stay QUEUED
        ids = [await start(api, tenant, f"many-{i}", 0) for i in range(3)]
        assert await _admitted(world, ids) == [True, False, False]
        raised = outlive(
            "tenant", "set-limits", "--tenant", slug, "--max-running-runs", "3", env=env
        )
        assert raised.returncode == 0, raised.stderr
        assert await _admitted(world, ids) == [True, True, True]
        waiting = await api.gql(READ, {"id": ids[2]}, token=tenant.token)
    assert waiting["run"]["waitingReason"] is None
    bad = outlive("tenant", "set-limits", "--tenant", slug, "--max-running-runs", "0", env=env)
    assert bad.returncode == 2
    assert bad.stderr.strip() == (
        "outlive: error: tenant set-limits: argument --max-running-runs: must be at least 1"
    )
    unknown = outlive(
        "tenant", "set-limits", "--tenant", "nope", "--max-inflight-jobs", "5", env=env
    )
    assert unknown.returncode == 2
    assert unknown.stderr.strip() == "outlive: error: no tenant 'nope'"


async def _admitted(world: World, ids: list[str]) -> list[bool]:
    conn = await asyncpg.connect(world.database_url)
    rows = {
        str(r["id"]): r["dispatched_at"] is not None
        for r in await conn.fetch(
            "SELECT id, dispatched_at FROM runs WHERE id = ANY($1::uuid[])", ids
        )
    }
    await conn.close()
    return [rows[i] for i in ids]


WAITERS = """SELECT count(*) FROM pg_stat_activity
              WHERE datname = current_database() AND wait_event_type = 'Lock'
                AND query LIKE '%outlive_dispatch_runs%'"""


async def test_a_burst_of_dispatches_of_one_tenant_waits_on_its_row_once(world: World) -> None:
    """Every settle dispatches its tenant after its commit. While one dispatch waits on the
    tenant's row, the rest of a process's burst shares the one after it instead of each holding
    a pooled connection in the row's queue (with the pool full of them, another tenant's claim
    waited: issue 26). `tests/services/test_coalesce.py` proves that no caller gets the answer
    of a dispatch that started before it asked."""
    from outlive.runtime import open_runtime

    tenant = await new_tenant(world.sessions, "bursty")
    await set_cap(world, tenant, 1, None)
    holder = await asyncpg.connect(world.database_url)
    watcher = await asyncpg.connect(world.database_url)
    try:
        async with open_runtime(world.settings, "worker") as runtime:
            admission = runtime.sessions.admission
            lock = holder.transaction()
            await lock.start()
            await holder.execute("SELECT 1 FROM tenants WHERE id = $1 FOR NO KEY UPDATE", tenant.id)
            burst = [asyncio.create_task(admission.dispatch_runs(tenant.id)) for _ in range(20)]
            # Until the first one reached the row (PostgreSQL's lock table: no event to await).
            while not await watcher.fetchval(WAITERS):  # noqa: ASYNC110
                await asyncio.sleep(0.01)
            # Unmerged, the other 19 would each take a connection (10 in the pool) and queue
            # behind the first within milliseconds: look for them for a while.
            seen = [await watcher.fetchval(WAITERS) for _ in range(50)]
            run_id = await watcher.fetchval(  # a run waiting for a slot, meanwhile
                "INSERT INTO runs (tenant_id, agent, input) VALUES ($1, 'many-0', '{}')"
                " RETURNING id",
                tenant.id,
            )
            await lock.commit()
            answers = await asyncio.gather(*burst)
            dispatched = await watcher.fetchval(
                "SELECT dispatched_at IS NOT NULL FROM runs WHERE id = $1", run_id
            )
    finally:
        await holder.close()
        await watcher.close()
    assert max(seen) == 1, f"dispatches waiting on the tenant's row at once: {max(seen)}"
    assert dispatched
    assert [run_id] in answers  # admitted once, by one of the burst's two dispatches
