"""The replay's row is its state: a duplicate delivery of a tick does nothing, and a replay's own
runs are never selected by it."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from sqlalchemy import text

from outlive.config import Settings
from outlive.db.models import ReplayStatus
from outlive.db.raw import prepare
from outlive.db.tx import Db, Sessions
from outlive.ids import TenantId
from outlive.jobs.producer import SaqJobProducer
from outlive.jobs.queues import JOBS_QUEUE, RUNS_QUEUE, create_queue
from outlive.jobs.run_instances import SaqRunInstances
from outlive.services import replays
from outlive.services.bulk_filters import runs_filter
from tests.support import TenantHandle


def validate(agent: str, stored: Mapping[str, Any]) -> Mapping[str, Any]:
    return stored


async def _linked_runs(db: Db, tenant: TenantHandle) -> int:
    row = await db.one(
        prepare(
            text(
                "SELECT count(*) AS n FROM runs"
                " WHERE retried_from_id IS NOT NULL AND tenant_id = :t"
            )
        ),
        t=tenant.id,
    )
    assert row is not None
    return int(row["n"])


async def test_a_duplicate_tick_does_nothing_and_replayed_runs_are_not_selected_again(
    settings: Settings, sessions: Sessions, tenant: TenantHandle
) -> None:
    assert settings.redis_url is not None
    runs_queue = create_queue(settings.redis_url, RUNS_QUEUE)
    jobs_queue = create_queue(settings.redis_url, JOBS_QUEUE)
    wired = sessions.wired(jobs=SaqJobProducer(jobs_queue, settings))
    instances = SaqRunInstances(runs_queue, settings)
    try:
        async with wired.unit() as uow:
            for agent in ("demo", "llm"):
                await uow.execute(
                    text(
                        "INSERT INTO runs (tenant_id, agent, status, input, created_at)"
                        " VALUES (:t, :a, 'FAILED', CAST(:i AS jsonb), now() - interval '1 hour')"
                    ),
                    t=tenant.id,
                    a=agent,
                    i=json.dumps({"turns": 1}),
                )
        async with wired.unit(tenant.id) as uow:
            replay = await replays.create_replay(
                uow,
                filter=runs_filter(replays.replay_statuses(None)),
                rate=1,
                limit=10,
                max_rate=5,
                max_runs=10,
            )
        assert replay.total == 2
        async with wired.unit() as uow:
            first = await replays.advance_replay(
                uow, replay.id, 0, validate=validate, instances=instances
            )
        async with wired.unit() as uow:
            duplicate = await replays.advance_replay(
                uow, replay.id, 0, validate=validate, instances=instances
            )
        assert first is not None
        assert (first.started, first.status) == (1, ReplayStatus.RUNNING)  # one a tick at rate 1
        assert duplicate is None  # an old tick, delivered again: nothing happens
        async with wired.unit() as uow:
            second = await replays.advance_replay(
                uow, replay.id, 1, validate=validate, instances=instances
            )
        assert second is not None
        assert (second.started, second.status) == (2, ReplayStatus.DONE)
        found = await replays.get_replay(wired, TenantId(tenant.id), replay.id)
        linked = await _linked_runs(wired, tenant)
        assert found is not None
        assert found.processed == found.total == 2
        assert linked == 2  # exactly one new run per replayed run
    finally:
        await runs_queue.disconnect()
        await jobs_queue.disconnect()


def test_the_pace_is_runs_per_tick_and_seconds_per_tick() -> None:
    assert replays.pace(1) == (1, 1.0)
    assert replays.pace(5) == (5, 1.0)
    assert replays.pace(2.5) == (2, 1.0)  # slower, never faster
    assert replays.pace(0.25) == (1, 4.0)
