"""The schedules' clock: each occurrence makes one run, however many relays fire it, and an
outage shorter than the catch-up window loses none; the overlap policy is the key's onConflict.

The clock is driven by hand here (`support.clock`: one relay pass's fire, as a worker makes it),
after moving a schedule's cursor back as an outage would have left it.
"""

from __future__ import annotations

import asyncio
from datetime import datetime, timedelta

from outlive.db.engine import create_engine, create_sessions
from outlive.db.tx import Sessions
from tests.schedules.support import RUNS, clock, create, rewind, rows
from tests.support import Api, NudgeWatch, TenantHandle


async def _scheduled_for(api: Api, token: str, schedule_id: str) -> list[datetime]:
    found = (await api.gql(RUNS, {"s": schedule_id}, token=token))["runs"]["edges"]
    return sorted(datetime.fromisoformat(e["node"]["scheduledFor"]) for e in found)


async def test_two_relays_fire_each_occurrence_of_an_outage_once_and_miss_what_is_too_old(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: object
) -> None:
    made = await create(
        api, tenant.token, cron="* * * * *", onConflict="ENQUEUE", catchupWindowSeconds=150
    )
    await rewind(sessions, made["id"], 5 * 60)  # down for five minutes
    other_engine = create_engine(settings.database_url)  # type: ignore[attr-defined]
    try:
        async with clock(settings) as fire:  # type: ignore[arg-type]
            fired = await asyncio.gather(fire(sessions), fire(create_sessions(other_engine)))
            again = await fire(sessions)
    finally:
        await other_engine.dispose()
    assert sorted(fired) == [0, 1]  # one relay took it, the other skipped its locked row
    assert again == 0
    (row,) = await rows(
        sessions,
        "SELECT last_fire_at, next_occurrence, date_trunc('minute', now()) AS minute"
        " FROM schedules WHERE id = :id",
        id=made["id"],
    )
    fired_at = row["last_fire_at"]
    first = row["minute"] - timedelta(minutes=5)
    expected = [
        first + timedelta(minutes=m)
        for m in range(6)
        if first + timedelta(minutes=m) <= fired_at
        and fired_at - (first + timedelta(minutes=m)) <= timedelta(seconds=150)
    ]
    assert 2 <= len(expected) <= 4
    assert await _scheduled_for(api, tenant.token, made["id"]) == expected
    assert row["next_occurrence"] == expected[-1] + timedelta(minutes=1)


async def test_reject_skips_an_occurrence_while_the_last_run_is_active(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: object
) -> None:
    rejecting = await create(api, tenant.token, cron="* * * * *", input={"delayMs": 60_000})
    queueing = await create(api, tenant.token, cron="* * * * *", onConflict="ENQUEUE")
    cancelling = await create(api, tenant.token, cron="* * * * *", onConflict="CANCEL_PREVIOUS")
    for made in (rejecting, queueing, cancelling):
        await rewind(sessions, made["id"], 120)  # two or three occurrences due, no worker
    async with clock(settings) as fire:  # type: ignore[arg-type]
        await fire(sessions)
    # Each of the three fired in that one pass: its cursor is past now. (Not `fire(...) == 3`:
    # the pass fires every tenant's due schedules, and another test's `* * * * *` schedule in
    # this database comes due again at each minute: a fresh-clone CI run counted 4.)
    moved = await rows(
        sessions,
        "SELECT id FROM schedules WHERE id = ANY(CAST(:ids AS uuid[])) AND next_fire_at > now()",
        ids=[made["id"] for made in (rejecting, queueing, cancelling)],
    )
    assert len(moved) == 3
    rejected = await _scheduled_for(api, tenant.token, rejecting["id"])
    queued = await _scheduled_for(api, tenant.token, queueing["id"])
    assert len(rejected) == 1  # the first; the others found it active
    assert len(queued) in (2, 3)
    assert rejected[0] == queued[0]
    statuses = await rows(
        sessions,
        "SELECT status FROM runs WHERE schedule_id = :id ORDER BY scheduled_for",
        id=cancelling["id"],
    )
    assert [r["status"] for r in statuses] == ["CANCELLED"] * (len(queued) - 1) + ["QUEUED"]


async def test_a_worker_s_relay_fires_a_due_schedule_by_itself(
    api: Api, tenant: TenantHandle, sessions: Sessions, settings: object, worker: object
) -> None:
    made = await create(api, tenant.token, cron="* * * * *", input={"turns": 1})
    async with NudgeWatch(settings.redis_url, sessions, tenant.id) as watch:  # type: ignore[attr-defined]
        await rewind(sessions, made["id"], 0)  # this minute's occurrence is due now

        async def ran() -> bool | None:
            found = await rows(
                sessions,
                "SELECT status FROM runs WHERE schedule_id = :id AND status = 'SUCCEEDED'",
                id=made["id"],
            )
            return True if found else None

        await watch.until_true(ran, timeout=60, what="the schedule's run")
    (schedule,) = await rows(sessions, "SELECT * FROM schedules WHERE id = :id", id=made["id"])
    assert schedule["last_fire_at"] is not None
    assert schedule["next_occurrence"] > schedule["last_fire_at"]
