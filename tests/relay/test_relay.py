"""The relay: PostgreSQL is the only truth, and the workers hand the queue what it says is due.

Each test fails on the code before the relay: a flushed queue stranded every QUEUED run and
PENDING delivery until someone read it (and then failed the runs), and a start while Redis was
down answered QUEUE_UNAVAILABLE and failed the run.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast
from uuid import UUID

import pytest
from redis.asyncio import Redis
from sqlalchemy import text
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from outlive.db.engine import create_engine, create_sessions
from outlive.db.ports import NO_ADMISSION
from outlive.db.raw import create_pool
from outlive.db.tx import Sessions
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue
from outlive.jobs.relay import MARKER_KEY, RedisQueueMarker
from outlive.jobs.run_instances import SaqRunInstances
from outlive.services.relay import Relay, Taken
from outlive.services.relay.lead import WakeLead
from outlive.worker import WorkerHost
from tests.conftest import make_settings, new_tenant
from tests.faults import OwnRedis, StallingProxy
from tests.support import Api, NudgeWatch, Servers, TenantHandle, loopback_server, settled

CREATE = """mutation($url: String!) {
  createWebhookEndpoint(url: $url, events: ["run.cancelled"]) { endpoint { id } } }"""
START = """mutation($i: StartRunInput!) {
  startRun(input: $i) { created run { id status waitingReason } } }"""


@pytest.fixture
async def receiver() -> AsyncIterator[tuple[asyncio.Queue[bytes], str]]:
    """A webhook endpoint on loopback: each POST's body lands in the queue."""
    bodies: asyncio.Queue[bytes] = asyncio.Queue()

    async def hook(request: Request) -> Response:
        bodies.put_nowait(await request.body())
        return Response(status_code=200)

    async with loopback_server(Starlette(routes=[Route("/hook", hook, methods=["POST"])])) as url:
        yield bodies, f"{url}/hook"


async def _job_count(redis_url: str, name: str) -> int:
    queue = create_queue(redis_url, name)
    try:
        return int(await queue.count("incomplete"))
    finally:
        await queue.disconnect()


async def test_a_flushed_queue_is_rebuilt_by_the_workers_without_a_read(
    servers: Servers,
    sessions: Sessions,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
    receiver: tuple[asyncio.Queue[bytes], str],
) -> None:
    bodies, url = receiver
    settings = make_settings(servers, relay_scan_s=0.5)
    assert settings.redis_url is not None
    async with Api.running(settings) as api:
        await api.gql(CREATE, {"url": url}, token=tenant.token)
        cancelled = await api.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0})
        await api.cancel(tenant.token, cancelled["run"]["id"])  # a PENDING delivery, queued
        quick = {"turns": 1, "delayMs": 0}
        runs = {
            (await api.start_run(t.token, "demo", quick))["run"]["id"]: t
            for t in (tenant, other_tenant)
        }
    assert await _job_count(settings.redis_url, RUNS_QUEUE) == len(runs) + 1  # + the cancelled
    assert await _job_count(settings.redis_url, JOBS_QUEUE) == 1
    flusher = Redis.from_url(settings.redis_url)
    await flusher.flushdb()  # Redis lost everything: only PostgreSQL knows what is due
    await flusher.aclose()

    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        body = await asyncio.wait_for(bodies.get(), 30)  # nobody read the delivery
        assert cancelled["run"]["id"] in body.decode()
        for run_id, owner in runs.items():
            async with NudgeWatch(settings.redis_url, sessions, owner.id) as watch:
                done = await watch.until(run_id, settled, timeout=30)  # reads the row, no API
            assert done.status == "SUCCEEDED", done.error
    finally:
        await host.stop()


async def test_a_start_while_redis_is_down_answers_queued_and_runs_when_it_is_back(
    servers: Servers, sessions: Sessions, tenant: TenantHandle, tmp_path: Path
) -> None:
    own = OwnRedis(tmp_path / "redis")
    await own.start()
    settings = make_settings(servers, redis_url=own.url, relay_scan_s=0.5)
    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        async with Api.running(settings) as api:
            await own.kill()  # Redis is down: connections are refused
            started = await api.gql(
                START,
                {"i": {"agent": "demo", "input": {"turns": 1, "delayMs": 0}}},
                token=tenant.token,
            )
            run = started["startRun"]["run"]
            assert run["status"] == "QUEUED"
            assert "queue" in run["waitingReason"]
            read = await api.gql(
                "query($id: ID!) { run(id: $id) { status waitingReason } }",
                {"id": run["id"]},
                token=tenant.token,
            )
            assert read["run"] == {"status": "QUEUED", "waitingReason": run["waitingReason"]}
            await own.start()  # back (same port, its AOF)
            async with NudgeWatch(own.url, sessions, tenant.id) as watch:
                done = await watch.until(run["id"], settled, timeout=30)
            assert done.status == "SUCCEEDED", done.error
            assert done.handoff_failed_at is None  # the relay handed it
    finally:
        await host.stop()
        await own.kill()


async def test_a_redis_that_hangs_holds_no_mutation(servers: Servers, tenant: TenantHandle) -> None:
    """A network path to Redis that stops passing bytes: the start still answers, QUEUED."""
    base = make_settings(servers)
    assert base.redis_url is not None
    async with StallingProxy.running(base.redis_url) as proxy:
        settings = make_settings(servers, redis_url=proxy.url(base.redis_url))
        async with Api.running(settings) as api:
            proxy.stall()
            try:
                async with asyncio.timeout(10):  # without the enqueue's timeout: forever
                    started = await api.gql(START, {"i": {"agent": "demo"}}, token=tenant.token)
            finally:
                proxy._flowing.set()  # let the API's shutdown close its connections
    assert started["startRun"]["run"]["status"] == "QUEUED"
    assert started["startRun"]["run"]["waitingReason"]


async def _due_rows(sessions: Sessions, tenants: list[TenantHandle], per_tenant: int) -> set[UUID]:
    """Admitted QUEUED runs and PENDING deliveries, all due, none in the queue."""
    ids: set[UUID] = set()
    async with sessions.unit() as uow:
        for t in tenants:
            rows = await uow.session.execute(
                text(
                    "INSERT INTO runs (tenant_id, agent, input, dispatched_at, relay_after)"
                    " SELECT :t, 'agent-' || g, '{}'::jsonb, now(), now()"
                    " FROM generate_series(1, :n) g RETURNING id"
                ),
                {"t": t.id, "n": per_tenant},
            )
            ids |= {r[0] for r in rows}
            endpoint = await uow.session.scalar(
                text(
                    "INSERT INTO webhook_endpoints (tenant_id, url, secret)"
                    " VALUES (:t, 'http://127.0.0.1:9/x', 'whsec_eA==') RETURNING id"
                ),
                {"t": t.id},
            )
            rows = await uow.session.execute(
                text(
                    "INSERT INTO webhook_deliveries (endpoint_id, tenant_id, event_type, body,"
                    " dispatched_at, relay_after)"
                    " SELECT :e, :t, 'run.succeeded', '{}'::jsonb, now(), now()"
                    " FROM generate_series(1, :n) g RETURNING id"
                ),
                {"e": endpoint, "t": t.id, "n": per_tenant},
            )
            ids |= {r[0] for r in rows}
    return ids


async def test_four_workers_relays_hand_each_due_row_once(servers: Servers) -> None:
    database_url = await servers.clone()  # nothing else is due there
    settings = make_settings(servers, database_url=database_url, relay_batch=40, queue_timeout_s=10)
    assert settings.redis_url is not None
    engine = create_engine(database_url)
    sessions = create_sessions(engine)
    tenants = [await new_tenant(sessions, "relay") for _ in range(4)]
    due = await _due_rows(sessions, tenants, per_tenant=60)
    await engine.dispose()
    redis = Redis.from_url(settings.redis_url)
    await redis.set(MARKER_KEY, "1")  # the queue has its data: only due rows are handed

    async def worker() -> list[Taken]:
        engine = create_engine(database_url)
        pool = await create_pool(database_url, max_size=2)
        own = create_sessions(engine, raw=pool)
        runs_queue = create_queue(settings.redis_url or "", RUNS_QUEUE)
        jobs_queue = create_queue(settings.redis_url or "", JOBS_QUEUE)
        relay = Relay(
            own,
            SaqRunInstances(runs_queue, settings),
            SaqJobProducer(jobs_queue, settings),
            RedisQueueMarker(redis, timeout_s=1),
            batch=settings.relay_batch,
            recheck_s=3600,
            default_runs_cap=10,
            default_jobs_cap=20,
            admission=NO_ADMISSION,
            lead=WakeLead(most_s=0.0, slots=32),
        )
        taken: list[Taken] = []
        try:
            while done := await relay.run_pass(scan=False):
                taken += done.taken
                if not done.taken:
                    break
        finally:
            await runs_queue.disconnect()
            await jobs_queue.disconnect()
            await pool.close()
            await engine.dispose()
        return taken

    handed = [t for taken in await asyncio.gather(*(worker() for _ in range(4))) for t in taken]
    counts = Counter(t.id for t in handed)
    assert set(counts) == due
    assert max(counts.values()) == 1
    assert await _job_count(settings.redis_url, RUNS_QUEUE) == len(due) // 2
    assert await _job_count(settings.redis_url, JOBS_QUEUE) == len(due) // 2
    await redis.aclose()


async def test_work_whose_dispatch_was_missed_is_admitted_and_sent_by_the_workers(
    servers: Servers,
    sessions: Sessions,
    tenant: TenantHandle,
    receiver: tuple[asyncio.Queue[bytes], str],
) -> None:
    """A process died between a commit and the dispatch after it: a run and a delivery wait for
    a slot that is free, and nobody reads them."""
    bodies, url = receiver
    settings = make_settings(servers, relay_scan_s=0.5)
    assert settings.redis_url is not None
    async with Api.running(settings) as api:
        await api.gql(CREATE, {"url": url}, token=tenant.token)
    async with sessions.unit() as uow:
        run_id = await uow.session.scalar(
            text(
                "INSERT INTO runs (tenant_id, agent, input, created_at) VALUES (:t, 'demo',"
                " '{\"turns\": 1, \"delayMs\": 0}'::jsonb, now() - interval '30 seconds')"
                " RETURNING id"
            ),
            {"t": tenant.id},
        )
        await uow.session.execute(
            text(
                "INSERT INTO webhook_deliveries (endpoint_id, tenant_id, event_type, body,"
                " created_at) SELECT id, tenant_id, 'run.cancelled', '{\"missed\": true}'::jsonb,"
                " now() - interval '30 seconds' FROM webhook_endpoints WHERE tenant_id = :t"
            ),
            {"t": tenant.id},
        )
    host = WorkerHost(settings, concurrency=4)
    await host.start()
    try:
        body = await asyncio.wait_for(bodies.get(), 30)
        assert b"missed" in body
        async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
            done = await watch.until(str(run_id), settled, timeout=30)
        assert done.status == "SUCCEEDED", done.error
    finally:
        await host.stop()


class _Counted:
    """The relay's sessions, counting the round trips it asks for (a unit counts one)."""

    def __init__(self, inner: Sessions) -> None:
        self.inner, self.count = inner, 0

    async def one(self, statement: Any, /, **params: Any) -> Any:
        self.count += 1
        return await self.inner.one(statement, **params)

    async def all(self, statement: Any, /, **params: Any) -> Any:
        self.count += 1
        return await self.inner.all(statement, **params)

    def unit(self) -> Any:
        self.count += 1
        return self.inner.unit()


async def test_an_idle_pass_is_one_look_and_a_due_timer_still_wakes(servers: Servers) -> None:
    """`LOOK`: a pass with nothing to do makes one statement, and still says when the next timer
    is due; a part with work to do (here a sleep whose timer passed) still runs."""
    database_url = await servers.clone()  # nothing else is due there
    settings = make_settings(servers, database_url=database_url)
    assert settings.redis_url is not None
    engine = create_engine(database_url)
    pool = await create_pool(database_url, max_size=2)
    sessions = create_sessions(engine, raw=pool)
    counted = _Counted(sessions)
    tenant = await new_tenant(sessions, "look")
    redis = Redis.from_url(settings.redis_url)
    await redis.set(MARKER_KEY, "1")  # the queue has its data
    runs_queue = create_queue(settings.redis_url, RUNS_QUEUE)
    relay = Relay(
        cast(Sessions, counted),
        SaqRunInstances(runs_queue, settings),
        SaqJobProducer(runs_queue, settings),
        RedisQueueMarker(redis, timeout_s=1),
        batch=10,
        recheck_s=60,
        default_runs_cap=10,
        default_jobs_cap=20,
        admission=NO_ADMISSION,
        lead=WakeLead(most_s=0.0, slots=4),
    )
    try:
        done = await relay.run_pass(scan=True)
        assert counted.count == 1
        assert done.next_wake_s is None
        async with sessions.unit() as uow:
            await uow.session.execute(
                text(
                    "INSERT INTO runs (tenant_id, agent, input, status, wake_at) VALUES"
                    " (:t, 'demo', '{}'::jsonb, 'WAITING', now() + interval '1 hour')"
                ),
                {"t": tenant.id},
            )
        counted.count = 0
        done = await relay.run_pass(scan=True)
        assert counted.count == 1  # still idle: the timer is ahead, and the look says when
        assert done.next_wake_s is not None
        assert 3500 < done.next_wake_s <= 3600
        async with sessions.unit() as uow:
            await uow.session.execute(text("UPDATE runs SET wake_at = now() - interval '1 s'"))
        done = await relay.run_pass(scan=True)
        assert done.woken == 1
    finally:
        await runs_queue.disconnect()
        await redis.aclose()
        await pool.close()
        await engine.dispose()
