"""Reconcile on read: a lost workflow instance settles its run FAILED, after the grace only."""

from __future__ import annotations

from sqlalchemy import text

from outlive.config import Settings
from outlive.db.tx import Sessions
from outlive.jobs.queues import RUNS_QUEUE, create_queue
from tests.support import Api, TenantHandle


async def _age(sessions: Sessions, run_id: str, seconds: float) -> None:
    async with sessions.unit() as uow:
        await uow.session.execute(
            text("UPDATE runs SET updated_at = now() - make_interval(secs => :s) WHERE id = :id"),
            {"s": seconds, "id": run_id},
        )


async def _remove_job(settings: Settings, run_id: str) -> None:
    assert settings.redis_url is not None
    queue = create_queue(settings.redis_url, RUNS_QUEUE)
    job = await queue.job(run_id)
    assert job is not None, "startRun should have created the instance"
    await queue.redis.delete(job.id)
    await queue.redis.lrem(queue._queued, 0, job.id)
    await queue.redis.zrem(queue._incomplete, job.id)
    assert await queue.job(run_id) is None
    await queue.disconnect()


async def test_a_run_whose_instance_vanished_is_settled_when_read_after_the_grace(
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
    assert after["status"] == "FAILED"
    assert f"workflow instance {lost} lost" in after["error"]
    assert after["finishedAt"]
    listed = await api.gql("{ runs { edges { node { id status } } } }", token=tenant.token)
    statuses = {e["node"]["id"]: e["node"]["status"] for e in listed["runs"]["edges"]}
    assert statuses == {lost: "FAILED", kept: "QUEUED"}


async def test_the_runs_list_reconciles_too(
    api: Api, settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    lost = (await api.start_run(tenant.token, "demo"))["run"]["id"]
    await _remove_job(settings, lost)
    await _age(sessions, lost, settings.reconcile_grace_s + 5)
    listed = await api.gql("{ runs { edges { node { id status error } } } }", token=tenant.token)
    (edge,) = listed["runs"]["edges"]
    assert edge["node"]["status"] == "FAILED"
    assert "lost" in edge["node"]["error"]
