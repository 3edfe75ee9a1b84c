"""Each cron task's effect on real rows."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta
from typing import Any
from uuid import UUID

from redis.asyncio import Redis
from sqlalchemy import text

from outlive.config import Settings
from outlive.cron.deps import CronDeps
from outlive.cron.tasks.invitations import expire_invitations
from outlive.cron.tasks.usage import roll_up_daily_usage
from outlive.db.tx import Sessions, UnitOfWork
from outlive.realtime.nudges import Publisher, channel_prefix
from outlive.services import retention, usage
from tests.support import Api, NudgeWatch, TenantHandle


async def _inserted(uow: UnitOfWork, sql: str, **params: Any) -> UUID:
    """The id an `INSERT … RETURNING id` wrote."""
    row = await uow.one(text(sql), **params)
    assert row is not None
    return UUID(str(row["id"]))


async def _run(
    sessions: Sessions,
    tenant: TenantHandle,
    *,
    status: str,
    created_days_ago: float,
    finished_days_ago: float | None = None,
    agent: str = "demo",
) -> UUID:
    async with sessions.unit() as uow:
        run_id = await _inserted(
            uow,
            """INSERT INTO runs (tenant_id, agent, status, input, created_at, updated_at,
                                 finished_at, event_seq)
               VALUES (:t, :a, :s, '{}', now() - CAST(:c AS float) * interval '1 day',
                       now() - CAST(:c AS float) * interval '1 day',
                       now() - CAST(:f AS float) * interval '1 day', 1)
               RETURNING id""",
            t=tenant.id,
            a=agent,
            s=status,
            c=created_days_ago,
            f=finished_days_ago,
        )
        await uow.execute(
            text("INSERT INTO run_events (run_id, seq, type, data) VALUES (:r, 1, 'x', '{}')"),
            r=run_id,
        )
    return run_id


async def _ids(sessions: Sessions, sql: str, **params: Any) -> set[UUID]:
    return {next(iter(row.values())) for row in await sessions.all(text(sql), **params)}


async def test_retention_deletes_only_what_is_old_and_settled(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    old_done = [
        await _run(sessions, tenant, status=s, created_days_ago=40, finished_days_ago=35)
        for s in ("SUCCEEDED", "FAILED", "CANCELLED")
    ]
    old_active = await _run(sessions, tenant, status="RUNNING", created_days_ago=40)
    recent_done = await _run(
        sessions, tenant, status="SUCCEEDED", created_days_ago=2, finished_days_ago=1
    )
    deleted = await retention.prune_runs(sessions, days=30, batch=2)  # several small batches
    assert deleted >= 3
    left = await _ids(sessions, "SELECT id FROM runs WHERE tenant_id = :t", t=tenant.id)
    assert left == {old_active, recent_done}
    events = await _ids(
        sessions,
        "SELECT run_id FROM run_events WHERE run_id = ANY(:ids)",
        ids=[*old_done, old_active, recent_done],
    )
    assert events == {old_active, recent_done}
    assert await retention.prune_runs(sessions, days=30) == 0  # idempotent


async def test_retention_prunes_settled_deliveries_by_age(
    sessions: Sessions, tenant: TenantHandle
) -> None:
    async with sessions.unit() as uow:
        endpoint = await _inserted(
            uow,
            "INSERT INTO webhook_endpoints (tenant_id, url, secret) "
            "VALUES (:t, 'https://e.example', 'whsec_x') RETURNING id",
            t=tenant.id,
        )
        ids = {}
        for name, status, days in (
            ("old_done", "DELIVERED", 40),
            ("old_failed", "FAILED", 40),
            ("old_pending", "PENDING", 40),
            ("new_done", "DELIVERED", 1),
        ):
            ids[name] = await _inserted(
                uow,
                "INSERT INTO webhook_deliveries (endpoint_id, tenant_id, event_type,"
                " body, status, created_at) VALUES (:e, :t, 'run.failed', '{}', :s,"
                " now() - make_interval(days => :d)) RETURNING id",
                e=endpoint,
                t=tenant.id,
                s=status,
                d=days,
            )
    assert await retention.prune_deliveries(sessions, days=30, batch=1) == 2
    left = await _ids(
        sessions, "SELECT id FROM webhook_deliveries WHERE tenant_id = :t", t=tenant.id
    )
    assert left == {ids["old_pending"], ids["new_done"]}


async def test_the_usage_roll_up_counts_right_and_never_doubles(
    api: Api,
    sessions: Sessions,
    settings: Settings,
    tenant: TenantHandle,
    other_tenant: TenantHandle,
) -> None:
    await _run(sessions, tenant, status="SUCCEEDED", created_days_ago=2, finished_days_ago=2)
    await _run(sessions, tenant, status="SUCCEEDED", created_days_ago=2, finished_days_ago=2)
    await _run(sessions, tenant, status="FAILED", created_days_ago=2, finished_days_ago=2)
    await _run(
        sessions, tenant, status="SUCCEEDED", created_days_ago=1.1, finished_days_ago=1, agent="llm"
    )
    await _run(sessions, other_tenant, status="SUCCEEDED", created_days_ago=2, finished_days_ago=2)
    today = usage.utc_today()
    await _run(sessions, tenant, status="QUEUED", created_days_ago=0)

    redis = Redis.from_url(settings.redis_url or "")
    deps = CronDeps(sessions=sessions, settings=settings, redis=redis)
    assert await roll_up_daily_usage(deps) == 7
    query = "{ usage(days: 5) { day agent status count } }"
    first = (await api.gql(query, token=tenant.token))["usage"]
    assert await roll_up_daily_usage(deps) == 7  # again: recomputed, not added
    second = (await api.gql(query, token=tenant.token))["usage"]
    await redis.aclose()

    days = await sessions.all(
        text(
            "SELECT to_char((created_at AT TIME ZONE 'UTC')::date, 'YYYY-MM-DD') AS day"
            " FROM runs WHERE tenant_id = :t ORDER BY created_at"
        ),
        t=tenant.id,
    )
    expected_days = {days[i]["day"] for i in range(4)}
    assert first == second
    counted = {(u["day"], u["agent"], u["status"]): u["count"] for u in first}
    assert sum(counted.values()) == 5
    assert counted[(str(today), "demo", "QUEUED")] == 1  # today, live
    assert {d for d, _, _ in counted} == {*expected_days, str(today)}
    assert sorted(counted.values()) == [1, 1, 1, 2]
    others = (await api.gql(query, token=other_tenant.token))["usage"]
    assert [u["count"] for u in others] == [1]
    rolled = await sessions.one(
        text("SELECT count(*) AS n FROM usage_rollups WHERE day >= :d"),
        d=today - timedelta(days=7),
    )
    assert rolled is not None
    assert rolled["n"] == 7


async def test_invitations_older_than_a_week_expire_and_nudge(
    api: Api, sessions: Sessions, settings: Settings, tenant: TenantHandle
) -> None:
    async def invitation(status: str, days: int) -> UUID:
        async with sessions.unit() as uow:
            return await _inserted(
                uow,
                "INSERT INTO invitations (tenant_id, email, token_hash, status, created_at,"
                " expires_at) VALUES (:t, :e, :h, :s, now() - make_interval(days => :d),"
                " now() - make_interval(days => :d) + interval '7 days') RETURNING id",
                t=tenant.id,
                e=f"{secrets.token_hex(3)}@x.example",
                h=hashlib.sha256(secrets.token_bytes(8)).digest(),
                s=status,
                d=days,
            )

    old_pending, old_failed = await invitation("PENDING", 8), await invitation("FAILED", 9)
    old_sent, fresh = await invitation("SENT", 30), await invitation("PENDING", 1)
    redis = Redis.from_url(settings.redis_url or "")
    publisher = Publisher(redis, prefix=channel_prefix(settings.redis_url or ""))
    deps = CronDeps(
        sessions=sessions.wired(nudge_sink=publisher.defer), settings=settings, redis=redis
    )
    async with NudgeWatch(settings.redis_url or "", sessions, tenant.id) as watch:
        assert await expire_invitations(deps) >= 3
        while len(watch.seen) < 3:
            assert await watch.next_nudge(timeout=5) is not None
    await redis.aclose()
    statuses = {
        i["id"]: i["status"]
        for i in (await api.gql("{ invitations { id status } }", token=tenant.token))["invitations"]
    }
    assert statuses == {
        str(old_pending): "EXPIRED",
        str(old_failed): "EXPIRED",
        str(old_sent): "EXPIRED",  # a SENT link expires too (it used to work for ever)
        str(fresh): "PENDING",
    }
    assert {(n["type"], n["id"]) for n in watch.seen} == {
        ("invitation.updated", str(old_pending)),
        ("invitation.updated", str(old_failed)),
        ("invitation.updated", str(old_sent)),
    }
