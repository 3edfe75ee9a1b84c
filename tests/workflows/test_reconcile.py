"""Reconcile on read: a lost workflow instance is rebuilt (never failed), after the grace only."""

from __future__ import annotations

from uuid import UUID

from saq.job import Status
from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.ids import RunId
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from outlive.services.runs import claim_run
from outlive.worker import WorkerHost
from tests.conftest import make_settings
from tests.support import Api, NudgeWatch, Servers, TenantHandle, settled


async def _age(sessions: Sessions, run_id: str, seconds: float) -> None:
    async with sessions.unit() as uow:
        await uow.execute(
            text("UPDATE runs SET updated_at = now() - make_interval(secs => :s) WHERE id = :id"),
            s=seconds,
            id=run_id,
        )


async def _remove_job(settings: Settings, run_id: str) -> None:
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE)
    job = await queue.job(run_id)
    assert job is not None, "startRun should have created the instance"
    part = queue.partition(run_id)  # the saq queue that holds it (one of a cluster's several)
    await part.redis.delete(job.id)
    await part.redis.lrem(part._queued, 0, job.id)
    await part.redis.zrem(part._incomplete, job.id)
    assert await queue.job(run_id) is None
    await queue.disconnect()


async def _has_job(settings: Settings, run_id: str) -> bool:
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE)
    try:
        job = await queue.job(run_id)
        return job is not None and not job.completed
    finally:
        await queue.disconnect()


async def test_a_run_whose_instance_vanished_is_handed_again_when_read_after_the_grace(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    lost = (await api.start_run(tenant.token, "demo"))["run"]["id"]
    kept = (await api.start_run(tenant.token, "llm", {"prompt": "x"}))["run"]["id"]
    await _remove_job(settings, lost)

    before = await api.run(tenant.token, lost)  # younger than the grace: left alone
    assert before is not None
    assert before["status"] == "QUEUED"

    grace = settings.reconcile_grace_s
    await _age(sessions, lost, grace + 5)
    await _age(sessions, kept, grace + 5)  # old too, but its instance is still there
    after = await api.run(tenant.token, lost)
    assert after is not None
    assert after["status"] == "QUEUED"  # never failed for a lost queue entry (contract §7)
    assert after["error"] is None
    assert await _has_job(settings, lost)  # its instance was rebuilt
    listed = await api.gql("{ runs { edges { node { id status } } } }", token=tenant.token)
    statuses = {e["node"]["id"]: e["node"]["status"] for e in listed["runs"]["edges"]}
    assert statuses == {lost: "QUEUED", kept: "QUEUED"}


async def test_the_runs_list_reconciles_too(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    lost = (await api.start_run(tenant.token, "demo"))["run"]["id"]
    await _remove_job(settings, lost)
    await _age(sessions, lost, settings.reconcile_grace_s + 5)
    listed = await api.gql("{ runs { edges { node { id status error } } } }", token=tenant.token)
    (edge,) = listed["runs"]["edges"]
    assert edge["node"]["status"] == "QUEUED"
    assert await _has_job(settings, lost)


async def test_a_run_stranded_by_a_dead_worker_is_reenqueued_when_read(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    """The chaos run of issue 9: the attempt's worker died, and so did the worker sweeping its
    job, which was left `aborting` in no list. saq calls that job alive; the row's lease, expired
    for longer than the grace, says otherwise."""
    settings = make_settings(servers, reconcile_grace_s=1)
    async with Api.running(settings) as api:
        run_id = (await api.start_run(tenant.token, "demo", {"turns": 1, "delayMs": 0}))["run"][
            "id"
        ]
        async with sessions.unit() as uow:  # attempt 1 was claimed, then its worker died
            assert await claim_run(uow, RunId(UUID(run_id)), lease_s=3) is not None
        await _age_lease(sessions, run_id, seconds=10)
        await _strand_job(settings, run_id)

        read = await api.run(tenant.token, run_id, events=True)
        assert read is not None
        assert (read["status"], read["lostAttempts"]) == ("QUEUED", 1)
        assert [e["type"] for e in read["events"]] == ["claimed", "lost"]
        assert read["events"][-1]["data"]["attempt"] == 1

        assert settings.redis_url is not None
        host = WorkerHost(settings, concurrency=2)
        await host.start()
        try:
            async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:
                run = await watch.until(run_id, settled)
        finally:
            await host.stop()
    assert (run.status, run.attempt, run.lost_attempts) == ("SUCCEEDED", 2, 1)


async def test_a_lost_worker_s_run_that_asked_to_cancel_settles_cancelled_when_read(
    servers: Servers, sessions: Sessions, tenant: TenantHandle
) -> None:
    settings = make_settings(servers, reconcile_grace_s=1)
    async with Api.running(settings) as api:
        run_id = (await api.start_run(tenant.token, "demo"))["run"]["id"]
        async with sessions.unit() as uow:
            assert await claim_run(uow, RunId(UUID(run_id)), lease_s=3) is not None
        await api.cancel(tenant.token, run_id)  # requested; nobody is left to act on it
        await _age_lease(sessions, run_id, seconds=10)
        read = await api.run(tenant.token, run_id)
    assert read is not None
    assert read["status"] == "CANCELLED"


async def test_a_lost_worker_within_the_grace_is_left_to_the_queue(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    run_id = (await api.start_run(tenant.token, "demo"))["run"]["id"]
    async with sessions.unit() as uow:
        assert await claim_run(uow, RunId(UUID(run_id)), lease_s=3) is not None
    await _age_lease(sessions, run_id, seconds=settings.reconcile_grace_s / 2)
    read = await api.run(tenant.token, run_id)
    assert read is not None
    assert (read["status"], read["lostAttempts"]) == ("RUNNING", 0)


async def _age_lease(sessions: Sessions, run_id: str, *, seconds: float) -> None:
    async with sessions.unit() as uow:
        await uow.execute(
            text(
                "UPDATE runs SET lease_expires_at = now() - make_interval(secs => :s)"
                " WHERE id = :id"
            ),
            s=seconds,
            id=run_id,
        )


async def _strand_job(settings: Settings, run_id: str) -> None:
    """What saq's old sweep left when its worker died between abort and retry."""
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE)
    job = await queue.job(run_id)
    assert job is not None
    job.status, job.error = Status.ABORTING, "swept"
    await queue.redis.set(job.id, queue.serialize(job))
    await queue.redis.lrem(queue._queued, 0, job.id)
    await queue.redis.zrem(queue._incomplete, job.id)
    await queue.disconnect()
